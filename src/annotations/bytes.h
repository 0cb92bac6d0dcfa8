// Plain values to and from the annotation byte forms (targets.h, coco.h),
// in this machine's byte order (little-endian where nostall runs).
#ifndef NOSTALL_ANNOTATIONS_BYTES_H_
#define NOSTALL_ANNOTATIONS_BYTES_H_

#include <cstdint>
#include <cstring>
#include <string>

namespace nostall::annotations {

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace nostall::annotations

#endif  // NOSTALL_ANNOTATIONS_BYTES_H_
