// Batches of samples of many sizes (ragged.h).
#include "ring/ragged.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace nostall::ring {
namespace {

// A sample of shape `d` in a layout of shape `D`, as rows: d[0] x d[1] rows
// of d[2] elements, row (i, j) at (i * D[1] + j) * D[2] in the layout. Axes
// whose size is the layout's are merged into the row, so a sample padded on
// its last axis alone is one row per outer index, and one not padded at all
// is one row.
struct Rows {
  int64_t d[3], D[3];
  Rows(const int64_t dims[3], const int64_t layout[3]) {
    for (int a = 0; a < 3; ++a) {
      d[a] = dims[a];
      D[a] = layout[a];
    }
    for (int pass = 0; pass < 2 && d[2] == D[2]; ++pass) {
      const int64_t dd[3] = {1, d[0], d[1] * d[2]}, DD[3] = {1, D[0], D[1] * D[2]};
      std::copy(dd, dd + 3, d);
      std::copy(DD, DD + 3, D);
    }
  }
  int64_t count() const { return d[0] * d[1]; }
  int64_t dense(int64_t r) const { return r * d[2]; }  // row r in the sample's dense layout
  int64_t at(int64_t r) const { return ((r / d[1]) * D[1] + r % d[1]) * D[2]; }
  int64_t elements() const { return D[0] * D[1] * D[2]; }
};

// Zeroes everything of layout `dst` (elements of `elem` bytes) that rows
// `rows` do not cover.
void ZeroPadding(uint8_t* dst, const Rows& rows, size_t elem) {
  int64_t covered = 0;  // elements before this point are written or zeroed
  for (int64_t r = 0; r < rows.count(); ++r) {
    const int64_t at = rows.at(r);
    if (at > covered) std::memset(dst + covered * elem, 0, static_cast<size_t>(at - covered) * elem);
    covered = at + rows.d[2];
  }
  if (rows.elements() > covered) {
    std::memset(dst + covered * elem, 0, static_cast<size_t>(rows.elements() - covered) * elem);
  }
}

}  // namespace

Status PaddedShape(const Geometry& g, const int64_t* dims, int64_t count, int64_t padded[3]) {
  for (int a = 0; a < 3; ++a) padded[a] = (g.ragged_axes >> a & 1) != 0 ? 1 : g.shape[a];
  for (int64_t p = 0; p < count; ++p) {
    for (int a = 0; a < 3; ++a) {
      const int64_t d = dims[3 * p + a];
      const bool ragged = (g.ragged_axes >> a & 1) != 0;
      if (ragged ? d < 1 || d > g.shape[a] : d != g.shape[a]) {
        return DataError("a sample's shape in the batch is out of the ring's bound on axis " +
                         std::to_string(a) + " (" + std::to_string(d) + " of " + std::to_string(g.shape[a]) +
                         "): the slot is damaged");
      }
      if (ragged) padded[a] = std::max(padded[a], d);
    }
  }
  const int64_t m = g.pad_multiple;
  for (int a = 0; a < 3; ++a) {
    if ((g.ragged_axes >> a & 1) != 0) padded[a] = (padded[a] + m - 1) / m * m;
  }
  return Status::OK();
}

// Sample p (kept as k <= p) goes from p x sample_bytes to k x the padded
// bytes, which is never after it; its rows move front to back. A row's
// destination is never after its source when the sample starts at the end
// of its destination (each row moves on by d[2] in the source and by at
// least that in the destination, and the last row's is then within the
// padding behind it), so a sample whose last row would move forward is
// first moved, whole, to that end; nothing it passes over is still unread.
void PadInPlace(uint8_t* data, uint64_t sample_bytes, size_t elem, int64_t* dims,
                const std::vector<int64_t>& keep, const int64_t padded[3]) {
  const uint64_t padded_bytes = static_cast<uint64_t>(padded[0] * padded[1] * padded[2]) * elem;
  for (size_t k = 0; k < keep.size(); ++k) {
    const int64_t p = keep[k];
    int64_t own[3];
    std::copy(dims + 3 * p, dims + 3 * p + 3, own);
    std::copy(own, own + 3, dims + 3 * k);
    const Rows rows(own, padded);
    uint8_t* dst = data + k * padded_bytes;
    const uint8_t* src = data + static_cast<uint64_t>(p) * sample_bytes;
    const int64_t last = rows.count() - 1;
    const size_t dense_bytes = static_cast<size_t>(rows.count() * rows.d[2]) * elem;
    if (dst + rows.at(last) * elem > src + rows.dense(last) * elem) {
      uint8_t* end = dst + padded_bytes - dense_bytes;
      std::memmove(end, src, dense_bytes);
      src = end;
    }
    const size_t row_bytes = static_cast<size_t>(rows.d[2]) * elem;
    for (int64_t r = 0; r <= last; ++r) {
      if (dst + rows.at(r) * elem != src + rows.dense(r) * elem) {
        std::memmove(dst + rows.at(r) * elem, src + rows.dense(r) * elem, row_bytes);
      }
    }
    ZeroPadding(dst, rows, elem);
  }
}

void CopyPadded(const uint8_t* src, const int64_t from[3], const int64_t dims[3], uint8_t* dst,
                const int64_t to[3], size_t elem) {
  const Rows in(dims, from), out(dims, to);
  // (Both split the sample into rows of the same length only when their
  // layouts merge the same axes; a row of the finer split at a time.)
  const int64_t len = std::min(in.d[2], out.d[2]);
  const int64_t rows = dims[0] * dims[1] * dims[2] / len;
  auto offset = [&](const Rows& r, int64_t i) {  // element i x len of the sample
    const int64_t e = i * len, row = e / r.d[2];
    return r.at(row) + e % r.d[2];
  };
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(dst + offset(out, i) * elem, src + offset(in, i) * elem, static_cast<size_t>(len) * elem);
  }
  ZeroPadding(dst, out, elem);
}

}  // namespace nostall::ring
