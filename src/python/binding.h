// What every file of the `_nostall` extension shares: Status -> Python
// exception (RaiseStatus, the one place it happens), text from the engine as
// Python str, arrays that own their memory, and the bindings defined beside
// module.cc (kinds.cc: the detection and audio functions).
#ifndef NOSTALL_PYTHON_BINDING_H_
#define NOSTALL_PYTHON_BINDING_H_

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>
#include <utility>
#include <vector>

#include "nostall/status.h"

namespace nostall::py {

namespace nb = nanobind;

// Paths keep bytes that are not UTF-8 as os.fsdecode does; messages show them escaped.
nb::object PathText(const std::string& s);
nb::object MessageText(const std::string& s);

// Raises `st` as its Python exception (nostall.errors' classes, ValueError, ...).
[[noreturn]] void RaiseStatus(const Status& st);

inline void RaiseIfError(const Status& st) {
  if (!st.ok()) RaiseStatus(st);
}

template <typename T>
T ValueOrRaise(Result<T> r) {
  if (!r.ok()) RaiseStatus(r.status());
  return std::move(r).value();
}

// A NumPy array owning `v` (moved in).
template <typename T>
nb::object Owned(std::vector<T> v, std::vector<size_t> shape) {
  auto* held = new std::vector<T>(std::move(v));
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(held->data(), shape.size(), shape.data(), owner));
}

// nostall.detection's and nostall.audio's functions (kinds.cc).
void BindDetection(nb::module_& m);
void BindAudio(nb::module_& m);
// nostall.video's (video.cc).
void BindVideo(nb::module_& m);
// nostall.serve's producer, _nostall.Server (server.cc).
void BindServer(nb::module_& m);

}  // namespace nostall::py

#endif  // NOSTALL_PYTHON_BINDING_H_
