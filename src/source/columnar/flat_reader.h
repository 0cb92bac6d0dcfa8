// A flatbuffer read with every offset checked against its bytes: the few
// fields of Arrow IPC's Message and RecordBatch tables the arrow driver
// needs (arrow_ipc_file.cc), whose headers are a file's claims. Written by
// hand: Arrow reads these tables but does not expose them, and its
// generated flatbuffer headers are not installed. Private to the source
// layer.
#ifndef NOSTALL_SOURCE_COLUMNAR_FLAT_READER_H_
#define NOSTALL_SOURCE_COLUMNAR_FLAT_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace nostall {

inline uint32_t FlatLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

inline uint64_t FlatLe64(const uint8_t* p) { return FlatLe32(p) | static_cast<uint64_t>(FlatLe32(p + 4)) << 32; }

// A flatbuffer, read with every offset checked against its bytes (the
// headers are the file's claims).
class Flat {
 public:
  explicit Flat(const std::string& b) : p_(reinterpret_cast<const uint8_t*>(b.data())), n_(b.size()) {}
  // A table: its position; false when it does not fit.
  bool Root(size_t* table) const { return n_ >= 4 && Table(FlatLe32(p_), table); }
  // Field `slot`'s position in `table`, 0 when absent.
  size_t Field(size_t table, int slot) const {
    const int64_t vt = static_cast<int64_t>(table) - static_cast<int32_t>(FlatLe32(p_ + table));
    if (vt < 0 || static_cast<uint64_t>(vt) + 4 > n_) return 0;
    const uint16_t vt_size = Le16(static_cast<size_t>(vt));
    const size_t entry = static_cast<size_t>(vt) + 4 + 2 * static_cast<size_t>(slot);
    if (entry + 2 > static_cast<size_t>(vt) + vt_size || entry + 2 > n_) return 0;
    const uint16_t off = Le16(entry);
    return off == 0 ? 0 : table + off;
  }
  bool Int64(size_t table, int slot, int64_t* v) const {
    const size_t at = Field(table, slot);
    if (at == 0) return false;
    if (at + 8 > n_) return false;
    *v = static_cast<int64_t>(FlatLe64(p_ + at));
    return true;
  }
  uint8_t Byte(size_t table, int slot) const {
    const size_t at = Field(table, slot);
    return at == 0 || at >= n_ ? 0 : p_[at];
  }
  // The table a uoffset field points to.
  bool Child(size_t table, int slot, size_t* out) const {
    const size_t at = Field(table, slot);
    return at != 0 && at + 4 <= n_ && Table(at + FlatLe32(p_ + at), out);
  }
  // A vector of `width`-byte structs: its first element and length.
  bool Vector(size_t table, int slot, size_t width, size_t* first, size_t* count) const {
    const size_t at = Field(table, slot);
    if (at == 0) {
      *count = 0;
      return true;
    }
    if (at + 4 > n_) return false;
    const size_t v = at + FlatLe32(p_ + at);
    if (v + 4 > n_) return false;
    *count = FlatLe32(p_ + v);
    *first = v + 4;
    return *count <= (n_ - *first) / width;
  }
  int64_t At64(size_t pos) const { return static_cast<int64_t>(FlatLe64(p_ + pos)); }

 private:
  bool Table(uint64_t pos, size_t* out) const {
    if (pos + 4 > n_) return false;
    *out = static_cast<size_t>(pos);
    return true;
  }
  uint16_t Le16(size_t at) const { return static_cast<uint16_t>(p_[at] | p_[at + 1] << 8); }
  const uint8_t* p_;
  size_t n_;
};

}  // namespace nostall

#endif  // NOSTALL_SOURCE_COLUMNAR_FLAT_READER_H_
