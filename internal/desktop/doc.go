// Package desktop is the root of the desktop guest runtime: the code that
// runs inside a desktop sandbox (or any Linux X11 desktop) and turns agent
// actions into X11 input and the screen into encoded frames.
//
// It holds no code itself; the work is split by side:
//
//   - x11: one connection to an X server — input through XTEST, capture
//     through MIT-SHM (or plain GetImage), the cursor through XFixes,
//     windows through EWMH/ICCCM properties, waits driven by X events;
//   - frame: the raw BGRX pixels a capture returns, their XXH3-128 identity
//     and the downscale to a maximum long edge;
//   - encode: PNG and JPEG encoders over a frame, and the screenshot
//     pipeline (scale → hash → encode);
//   - xvfbtest: a throwaway Xvfb for tests and benchmarks.
//
// Decisions and measurements: docs/decisions/0010-desktop-guest.md.
package desktop
