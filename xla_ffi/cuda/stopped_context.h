// What becomes of a process whose GPU context a jaccl failure stopped.
//
// Contract: end_after_stopped_context(device) is called once the reason for device `device`'s
// failure has been printed (a barrier or wait kernel of that device trapped, or is about to):
// from then on the CUDA context is lost for the process's lifetime. The first call starts a
// timer; if the process is still alive kStoppedContextGraceSeconds later, it prints why it ends
// and exits with status 1, as an uncaught exception would. Later calls do nothing.
//
// Why: XLA:GPU does not hand a trapped kernel's error to a caller already waiting for the
// device (seen on jax 0.11.2, H200: jax.block_until_ready waited for good while a call
// dispatched after the trap raised), so without this a process whose Python was waiting when
// the failure came would never end. The grace lets a process that did get the error in Python
// end by itself, with its own traceback.
#pragma once

#include <cstdint>

namespace jaccl::cuda {

inline constexpr double kStoppedContextGraceSeconds = 2.0;

void end_after_stopped_context(int64_t device);

}  // namespace jaccl::cuda
