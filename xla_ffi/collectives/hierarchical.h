// Hierarchical collectives for groups that span hosts: the bytes cross the network once,
// between one rank per host and block, instead of between every pair of ranks.
//
// The group's ranks are seen as H hosts x L local ranks (every host must hold the same
// number); (h, l) is local rank l of host h.
//
// all_reduce: the buffer is cut into L blocks, block l into H sub-blocks.
//   1. within each host, (h, l) reduces block l of its host's inputs in ascending local
//      order into a float-accumulator scratch buffer (mesh reduce-scatter);
//   2. across hosts, (h, l) reduces sub-block h of block l over the H scratch buffers of
//      ranks (., l) in ascending host order, into its output (partials travel in the
//      accumulator type);
//   3. across hosts, (., l) all-gather the H sub-blocks of block l;
//   4. within each host, the L blocks are all-gathered.
//   Each host sends 2(H-1)/H of the buffer over the network in total; every element is
//   reduced once, in the fixed order (host ascending, local rank ascending), so every rank
//   holds the same bits. In place is safe: the output is first written in step 2, after
//   every read of the input.
//
// reduce_scatter: rank r wants block r of the N blocks.
//   1. within each host, (h, l) reduces, for every host k, block r(k, l) of its host's
//      inputs into scratch (H partial blocks);
//   2. across hosts, (h, l) reduces block r(h, l) over the H partials of ranks (., l).
//   Each host sends (H-1)/H of the buffer over the network.
#pragma once

#include "collectives/collectives.h"

namespace jaccl {

// Groups it applies to have Communicator::Member::hierarchical set.
void hierarchical_all_reduce(Call& call, const Buffers& buffers);
void hierarchical_reduce_scatter(Call& call, const Buffers& buffers);

}  // namespace jaccl
