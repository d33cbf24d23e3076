// Structs declared once for C and C++: the requests that cross from one module to another
// (collectives/request.h, moe/request.h, through abi/host_abi.h to the CUDA module and the mpiabi
// library, in C).
//
// Contract: JACCL_FIELD(cpp_type, c_type) is a field's type, an engine enum in C++ and an
// integer of the same width in C (the layout is the same in both); JACCL_DEFAULT(value) gives a
// field its default in C++ (C callers memset the struct and set the fields they use).
#pragma once

#ifdef __cplusplus
#define JACCL_FIELD(cpp_type, c_type) cpp_type
#define JACCL_DEFAULT(value) = value
#else
#define JACCL_FIELD(cpp_type, c_type) c_type
#define JACCL_DEFAULT(value)
#endif
