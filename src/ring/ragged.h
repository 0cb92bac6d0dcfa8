// Batches of samples of many sizes (a ragged ring, docs/ring_format.md):
// each sample is written dense in its own shape at its place in the slot
// (p x the bound's bytes), its shape beside it (Segment::dims); when the
// batch is complete it is padded in place to one shape, the batch's
// largest on each ragged axis rounded up to the ring's multiple, and laid
// out contiguously from the slot's start, as any batch is. What is handed
// out is a view of it, with each sample's own shape.
//
// Written by hand: no library pads a batch of differently shaped arrays in
// place (torch's pad_sequence and detectron2's ImageList allocate a new
// tensor and copy every sample into it).
#ifndef NOSTALL_RING_RAGGED_H_
#define NOSTALL_RING_RAGGED_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nostall/status.h"
#include "ring/ring.h"

namespace nostall::ring {

// The padded shape of samples whose own shapes are `dims` (3 int64s per
// sample, `count` samples): on each ragged axis the largest, rounded up to
// the ring's multiple; on the others the ring's shape. A sample whose shape
// is out of the ring's bound (memory another process wrote) is an error.
Status PaddedShape(const Geometry& g, const int64_t* dims, int64_t count, int64_t padded[3]);

// Pads a complete batch in place: the samples at positions `keep`
// (ascending), each dense in its shape dims[3 p..3 p + 3) at p x
// `sample_bytes` of `data`, become samples 0, 1, ... of shape `padded`,
// contiguous from `data`, the padding zero; their shapes move to rows 0, 1,
// ... of `dims`. Each sample's shape must fit `padded` (PaddedShape).
void PadInPlace(uint8_t* data, uint64_t sample_bytes, size_t elem, int64_t* dims,
                const std::vector<int64_t>& keep, const int64_t padded[3]);

// One sample of shape `dims`, stored in a padded layout of shape `from` at
// `src`, copied into a padded layout of shape `to` at `dst` (no overlap),
// the padding zero. `dims` must fit both.
void CopyPadded(const uint8_t* src, const int64_t from[3], const int64_t dims[3], uint8_t* dst,
                const int64_t to[3], size_t elem);

}  // namespace nostall::ring

#endif  // NOSTALL_RING_RAGGED_H_
