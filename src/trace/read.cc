// Streams a torch.profiler Chrome trace into Events (events.h): zlib reads
// the file (gzip or plain alike), nlohmann's SAX parser walks it, and only
// the complete ("X") events' few fields are kept.
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <istream>
#include <memory>
#include <streambuf>

#include <nlohmann/json.hpp>

#include "trace/events.h"

namespace nostall::trace {
namespace {

using json = nlohmann::json;

// A std::streambuf over gzread (which reads a file that is not gzip as it is).
class GzBuf : public std::streambuf {
 public:
  explicit GzBuf(gzFile f) : f_(f), buf_(1 << 20) {}
  std::string error;

 protected:
  int_type underflow() override {
    const int n = gzread(f_, buf_.data(), static_cast<unsigned>(buf_.size()));
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(f_, &code);
      error = msg ? msg : "read error";
      return traits_type::eof();
    }
    if (n == 0) {
      // gzread returns 0 at the end, and at a cut gzip stream (gzerror says).
      int code = 0;
      const char* msg = gzerror(f_, &code);
      if (code != Z_OK && code != Z_STREAM_END && msg) error = msg;
      return traits_type::eof();
    }
    setg(buf_.data(), buf_.data(), buf_.data() + n);
    return traits_type::to_int_type(buf_[0]);
  }

 private:
  gzFile f_;
  std::vector<char> buf_;
};

Cat CatOf(const std::string& c) {
  if (c == "cpu_op") return Cat::kCpuOp;
  if (c == "user_annotation") return Cat::kUserAnnotation;
  if (c == "python_function") return Cat::kPython;
  if (c == "cuda_runtime") return Cat::kRuntime;
  if (c == "cuda_driver") return Cat::kDriver;
  if (c == "kernel") return Cat::kKernel;
  if (c == "gpu_memcpy") return Cat::kMemcpy;
  if (c == "gpu_memset") return Cat::kMemset;
  return Cat::kOther;
}

// The SAX handler. The trace is either {"traceEvents": [event, ...], ...}
// (what torch.profiler writes) or a bare [event, ...] (Chrome's other form).
// An event is an object at the events' depth; its "args" one deeper.
class Reader : public nlohmann::json_sax<json> {
 public:
  Events out;
  std::string error;
  bool saw_events = false;
  int64_t max_events = kMaxEvents;

  bool null() override { return Scalar(); }
  bool boolean(bool) override { return Scalar(); }
  bool number_integer(number_integer_t v) override { return Number(static_cast<double>(v), v); }
  bool number_unsigned(number_unsigned_t v) override {
    return Number(static_cast<double>(v), v > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    return Number(v, v >= -9e18 && v <= 9e18 ? static_cast<int64_t>(v) : -1);
  }
  bool string(string_t& v) override {
    if (depth_ == event_depth_ && in_event_) {
      if (key_ == "name") name_ = std::move(v);
      else if (key_ == "cat") cat_ = CatOf(v);
      else if (key_ == "ph") ph_ = v;
      else if (key_ == "pid") pid_ = std::move(v);
      else if (key_ == "tid") tid_ = std::move(v);
      else if (key_ == "ts" || key_ == "dur") return Bad("\"" + key_ + "\" is a string");
    }
    return true;
  }
  bool binary(binary_t&) override { return true; }
  bool key(string_t& k) override {
    if (depth_ == 1 && top_is_object_) top_key_ = k;
    if (depth_ == 2 && in_marks_) mark_key_ = k;
    if (depth_ == event_depth_ || depth_ == event_depth_ + 1) key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 1) top_is_object_ = true;
    if (depth_ == 2) in_marks_ = top_is_object_ && top_key_ == "nostall";
    if (event_depth_ > 0 && depth_ == event_depth_ && in_events_array_) StartEvent();
    if (in_event_ && depth_ == event_depth_ + 1) in_args_ = key_ == "args";
    return true;
  }
  bool end_object() override {
    if (in_event_ && depth_ == event_depth_) EndEvent();
    if (depth_ == 2) in_marks_ = false;
    if (depth_ == event_depth_ + 1) in_args_ = false;
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    ++depth_;
    if (depth_ == 1) {  // a bare list of events
      event_depth_ = 2;
      in_events_array_ = true;
      saw_events = true;
    } else if (depth_ == 2 && top_is_object_ && top_key_ == "traceEvents") {
      event_depth_ = 3;
      in_events_array_ = true;
      saw_events = true;
    }
    return true;
  }
  bool end_array() override {
    if (in_events_array_ && depth_ == event_depth_ - 1) in_events_array_ = false;
    --depth_;
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    if (error.empty()) error = "not valid JSON at byte " + std::to_string(pos) + ": " + e.what();
    return false;
  }

 private:
  bool Bad(std::string what) {
    error = "event " + std::to_string(index_) + ": " + what;
    return false;
  }
  bool Scalar() { return true; }
  bool Number(double d, int64_t i) {
    if (in_marks_ && depth_ == 2 && std::isfinite(d) &&
        (out.marks.size() < kMaxMarks || out.marks.count(mark_key_))) {
      out.marks[mark_key_.substr(0, 64)] = d;
    }
    if (!in_event_) return true;
    if (depth_ == event_depth_) {
      if (key_ == "ts") ts_ = d, has_ts_ = true;
      else if (key_ == "dur") dur_ = d;
      else if (key_ == "pid") pid_ = std::to_string(i);
      else if (key_ == "tid") tid_ = std::to_string(i);
    } else if (depth_ == event_depth_ + 1 && in_args_ && key_ == "correlation") {
      correlation_ = i;
    }
    return true;
  }
  void StartEvent() {
    in_event_ = true;
    name_.clear(), ph_.clear(), pid_.clear(), tid_.clear();
    cat_ = Cat::kOther, ts_ = 0, dur_ = 0, correlation_ = -1, has_ts_ = false;
  }
  void EndEvent() {
    in_event_ = false;
    ++index_;
    if (ph_ == "s" || ph_ == "f") ++out.flows;
    if (ph_ != "X" || !has_ts_) return;
    ++out.counts[static_cast<int>(cat_)];
    if (cat_ == Cat::kOther) return;
    // NaN, infinite and negative times are skipped; they place nothing.
    if (!(ts_ >= 0 && ts_ < 1e18) || !(dur_ >= 0 && dur_ < 1e15)) return;
    if (static_cast<int64_t>(out.events.size()) >= max_events) {
      ++out.not_kept;
      return;
    }
    Event e;
    e.ts = ts_;
    e.dur = dur_;
    e.correlation = correlation_;
    e.cat = cat_;
    auto [it, added] = name_ids_.try_emplace(name_, static_cast<uint32_t>(out.names.size()));
    if (added) out.names.push_back(name_);
    e.name = it->second;
    std::string lane_key = pid_;
    lane_key += '\x1f';
    lane_key += tid_;
    auto [lt, new_lane] = lane_ids_.try_emplace(lane_key, static_cast<uint32_t>(out.lanes.size()));
    if (new_lane) out.lanes.push_back(Lane{pid_, tid_, OnGpu(cat_)});
    e.lane = lt->second;
    if (OnGpu(cat_)) out.lanes[e.lane].gpu = true;
    out.events.push_back(e);
  }

  int depth_ = 0;
  int event_depth_ = 0;
  bool top_is_object_ = false;
  bool in_events_array_ = false;
  bool in_event_ = false;
  bool in_args_ = false;
  bool in_marks_ = false;  // inside the top-level "nostall" object
  std::string top_key_, key_, mark_key_;
  int64_t index_ = 0;
  // The event being read.
  std::string name_, ph_, pid_, tid_;
  Cat cat_ = Cat::kOther;
  double ts_ = 0, dur_ = 0;
  bool has_ts_ = false;
  int64_t correlation_ = -1;
  std::unordered_map<std::string, uint32_t> name_ids_;
  std::unordered_map<std::string, uint32_t> lane_ids_;
};

Result<Events> Finish(Reader& r, bool ok, const std::string& what) {
  if (!ok || !r.error.empty()) {
    return DataError(what + ": not a torch.profiler trace: " +
                     (r.error.empty() ? std::string("not valid JSON") : r.error));
  }
  if (!r.saw_events) {
    return DataError(what + ": not a torch.profiler trace: it has no \"traceEvents\" list "
                            "(write one with torch.profiler.profile(on_trace_ready="
                            "torch.profiler.tensorboard_trace_handler(DIR)) or "
                            "prof.export_chrome_trace(PATH))");
  }
  return std::move(r.out);
}

}  // namespace

Result<Events> ParseEvents(const char* data, size_t size, const std::string& what, int64_t max_events) {
  Reader r;
  r.max_events = max_events;
  const bool ok = json::sax_parse(data, data + size, &r, json::input_format_t::json, true);
  return Finish(r, ok, what);
}

Result<Events> ReadEvents(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) return NotFound(path + ": no such trace file");
    return ErrnoError(path, err);
  }
  std::unique_ptr<gzFile_s, int (*)(gzFile)> closer(f, gzclose);
  gzbuffer(f, 1 << 20);
  GzBuf buf(f);
  std::istream in(&buf);
  Reader r;
  bool ok = false;
  try {
    ok = json::sax_parse(in, &r, json::input_format_t::json, true);
  } catch (const std::exception& e) {
    if (r.error.empty()) r.error = e.what();
  }
  if (!buf.error.empty()) return DataError(path + ": cannot read the trace: " + buf.error);
  return Finish(r, ok, path);
}

}  // namespace nostall::trace
