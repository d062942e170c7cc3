/** /proc/pressure/memory as the kernel prints it: calm, and over the default psi limit (10.00). */
export const CALM_PSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
export const HOT_PSI = "some avg10=12.40 avg60=3.10 avg300=1.00 total=123456\nfull avg10=4.00 avg60=1.00 avg300=0.30 total=23456\n";
