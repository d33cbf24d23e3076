// JACCL_VECTOR_CLONES: compiles a hot loop for AVX-512 and AVX2 beside the baseline x86-64, and
// the loader picks the widest one the CPU has (GCC/Clang target_clones, an ifunc). The
// function is flattened, so the templates it calls are compiled for each target too.
//
// Contract: the clones compute exactly what the baseline does. Vectorising never reorders an
// element's operations, and jaccl_core is built with -ffp-contract=off, so no clone fuses a
// multiply and an add: results stay bitwise equal across machines. Elsewhere (other
// architectures, compilers without the attribute) it expands to nothing.
#pragma once

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && __has_attribute(flatten)
#define JACCL_VECTOR_CLONES __attribute__((flatten, target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef JACCL_VECTOR_CLONES
#define JACCL_VECTOR_CLONES
#endif
