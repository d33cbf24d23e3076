// The call sites of a program's jaccl collectives: where in the user's code each custom call
// was written, so that ranks running different collectives that look alike (same kind, shape,
// dtype and op) get "ranks disagree" naming both places instead of pairing with each other.
//
// Contract: a site is a 32-bit hash made at lowering (jax_jaccl/_call_site.py) from the
// user's file name, line, function, name stack and the occurrence of that place in the
// program; every process lowering the same program makes the same sites. 0 is "no site" (XLA's
// own collectives through the mpiabi library, point-to-point transfers); the mpiabi library's split
// exchange has a site of its own (abi/mpiabi_table.h). name_site() records the
// text of a site (the lowering tells every process about its own); site_name() returns it, or
// "call site 0x..." for a site this process never lowered; at_site() is " at <its text>" for a
// message about a call, "" for site 0. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace jaccl {

void name_site(uint32_t site, const std::string& name);
std::string site_name(uint32_t site);
std::string at_site(uint32_t site);

}  // namespace jaccl
