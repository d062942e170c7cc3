#!/usr/bin/env node
// Ctrl-C is drill's to say from here on (src/interrupt.ts), while the rest loads.
import { interruptWhileStarting } from "../dist/interrupt.js";

interruptWhileStarting();
const { main } = await import("../dist/main.js");
process.exitCode = await main(process.argv);
