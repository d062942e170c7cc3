#!/usr/bin/env node
// Runs the bundle `npm run build` makes (scripts/bundle.mjs says why).
// Ctrl-C is drill's to say from here on (src/interrupt.ts), while the rest loads.
import { interruptWhileStarting } from "../dist/bundle/interrupt.js";

interruptWhileStarting();
const { main } = await import("../dist/bundle/main.js");
process.exitCode = await main(process.argv);
