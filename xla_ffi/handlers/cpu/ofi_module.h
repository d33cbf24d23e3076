// The libfabric part of the _jaccl module (bootstrap and jaccl-info), present whether or not
// the engine was built with libfabric.
//
// Contract: ofi_built() says whether it was; without it, ofi_choose() answers why not and the
// lists are empty. ofi_local_info()/ofi_add_peers() run between init_world() and
// attach_peers() (World's OFI contract).
#pragma once

#include <nanobind/nanobind.h>

void define_ofi_functions(nanobind::module_& m);
