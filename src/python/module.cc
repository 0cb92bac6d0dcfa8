// The `_nostall` extension: a thin layer over nostall::Loader.
//
// Every call that can wait releases the GIL. Batches leave as zero-copy
// NumPy arrays (via nanobind) whose capsule owner holds a lease on the ring
// slot: the slot is refilled only when every array of the batch is gone.
// Status -> Python exception happens in RaiseStatus and nowhere else.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "nostall/analyze.h"
#include "nostall/cache.h"
#include "nostall/epoch_cursor.h"
#include "nostall/loader.h"
#include "nostall/shared.h"
#include "nostall/trace.h"
#include "nostall/transforms.h"
#include "common/interrupt.h"
#include "python/binding.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace nostall {
namespace py {

// Text from the engine as a Python str. Messages and paths may hold bytes
// that are not UTF-8 (a file name, a label read from a file): a path keeps
// them as os.fsdecode does (surrogateescape: it still opens the file), a
// message shows them escaped. Never a UnicodeDecodeError in their place.
nb::object Text(const std::string& s, const char* errors) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), errors);
  if (o == nullptr) throw nb::python_error();
  return nb::steal(o);
}
nb::object PathText(const std::string& s) { return Text(s, "surrogateescape"); }
nb::object MessageText(const std::string& s) { return Text(s, "backslashreplace"); }

// Ctrl-C during a wait on the main thread (an S3 listing in a
// constructor): the wait is Cancelled with KeyboardInterrupt left pending,
// which RaiseStatus then raises. Other threads never take the GIL here.
unsigned long g_main_thread = 0;  // threading.main_thread().ident
bool PythonInterrupted() {
  if (PyThread_get_thread_ident() != g_main_thread || !Py_IsInitialized()) return false;
  nb::gil_scoped_acquire gil;
  // Only the first check sees the signal itself; a Ctrl-C already taken
  // (its KeyboardInterrupt pending) interrupts every wait after it too.
  if (PyErr_Occurred() != nullptr && PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) return true;
  return PyErr_CheckSignals() != 0;
}

[[noreturn]] void RaiseStatus(const Status& st) {
  if (st.code() == StatusCode::kCancelled && PyErr_Occurred()) throw nb::python_error();
  nb::object errors = nb::module_::import_("nostall.errors");
  nb::object type;
  bool named = true;  // the exception's class says what the code says
  switch (st.code()) {
    case StatusCode::kDataError: {
      nb::object exc = errors.attr("DataError")(MessageText(st.Describe()), PathText(st.item()),
                                                st.stage());
      PyErr_SetObject(exc.type().ptr(), exc.ptr());
      throw nb::python_error();
    }
    case StatusCode::kInvalidArgument: type = nb::borrow(PyExc_ValueError); break;
    case StatusCode::kNotFound: type = nb::borrow(PyExc_FileNotFoundError); break;
    case StatusCode::kPermissionDenied: type = nb::borrow(PyExc_PermissionError); break;
    case StatusCode::kResourceExhausted: type = errors.attr("ResourceError"); break;
    default: type = errors.attr("NostallError"); named = false; break;
  }
  PyErr_SetObject(type.ptr(), MessageText(named ? st.Describe() : st.ToString()).ptr());
  throw nb::python_error();
}

}  // namespace py

namespace {

using namespace py;  // NOLINT: the binding's own helpers (binding.h)

// An array over the batch's memory whose owner keeps the batch leased.
nb::object View(const std::shared_ptr<Batch>& batch, const void* data, std::vector<size_t> shape,
                nb::dlpack::dtype dtype) {
  auto* lease = new std::shared_ptr<Batch>(batch);
  nb::capsule owner(lease, [](void* p) noexcept { delete static_cast<std::shared_ptr<Batch>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy>(const_cast<void*>(data), shape.size(), shape.data(),
                                         owner, nullptr, dtype));
}


class PyLoader {
 public:
  explicit PyLoader(const std::string& spec_json) {
    LoaderSpec spec = ValueOrRaise(LoaderSpec::FromJson(spec_json));
    Result<std::unique_ptr<nostall::Loader>> r = [&] {
      nb::gil_scoped_release release;
      return nostall::Loader::Create(spec);
    }();
    loader_ = ValueOrRaise(std::move(r));
    cursor_ = std::make_unique<EpochCursor>(loader_.get(), "");
  }
  PyLoader(std::unique_ptr<nostall::Loader> loader, const std::string& shared)
      : loader_(std::move(loader)), cursor_(std::make_unique<EpochCursor>(loader_.get(), shared)) {}

  // A consumer of the shared loader `name` (options: see AttachOptions).
  static PyLoader* Attach(const std::string& name, int64_t batch_size, double producer_timeout_s,
                          bool fallback, uint64_t expect_fingerprint, double attach_timeout_s,
                          const std::string& expect_spec) {
    AttachOptions o;
    o.expect_spec_json = expect_spec;
    o.batch_size = batch_size;
    o.producer_timeout_s = producer_timeout_s;
    o.fallback_to_private = fallback;
    o.expect_spec_fingerprint = expect_fingerprint;
    o.attach_timeout_s = attach_timeout_s;
    Result<std::unique_ptr<nostall::Loader>> r = [&] {
      nb::gil_scoped_release release;
      return AttachShared(name, o);
    }();
    return new PyLoader(ValueOrRaise(std::move(r)), name);
  }

  // The epoch cursor (nostall/epoch_cursor.h): the package's iteration,
  // set_epoch and state_dict are these.
  void SetEpoch(int64_t epoch) { RaiseIfError(Cursor().SetEpoch(epoch)); }
  void Begin() {
    const Use use(this);  // (lets the GIL go: Close waits for it)
    Status st;
    {
      nb::gil_scoped_release release;
      st = HeldCursor().Begin();
    }
    RaiseIfError(st);
  }
  std::string StateJson() const {
    const Use use(this);  // (lets the GIL go: Close waits for it)
    Result<std::string> r = [&] {
      nb::gil_scoped_release release;  // (a buffered epoch's state waits for the index)
      return HeldCursor().StateJson();
    }();
    return ValueOrRaise(std::move(r));
  }
  void LoadStateJson(const std::string& state) {
    const Use use(this);  // (lets the GIL go: Close waits for it)
    Status st;
    {
      nb::gil_scoped_release release;
      st = HeldCursor().LoadStateJson(state);
    }
    RaiseIfError(st);
  }
  int64_t Epoch() const { return Cursor().epoch(); }
  int64_t Position() const { return Cursor().position(); }
  bool Active() const { return Cursor().active(); }
  // The last next() ended the epoch (its last batch, a bad last batch, or the
  // end asked for first): true once per epoch, as the cursor says.
  bool EpochOver() const { return epoch_over_; }
  // The last batch's slot memory (address, bytes); (0, 0) for a copy.
  std::pair<uintptr_t, size_t> BatchMemory() const { return batch_memory_; }

  // (images, labels, indices, copied, epoch_over, fields, sample_dims), or
  // None at the end of the epoch; epoch_over: this batch was the epoch's
  // last; sample_dims: for samples of many sizes, each one's shape (B x 3),
  // else None. A bad batch
  // raises (and is consumed). A batch of no samples is never returned.
  nb::object Next() { return NextBatch(/*cursor=*/true); }
  nb::object NextPlanned() { return NextBatch(/*cursor=*/false); }
  nb::object NextBatch(bool cursor) {
    const Use use(this);  // (lets the GIL go: Close waits for it)
    NextStatus ns = NextStatus::kTimeout;
    std::shared_ptr<Batch> batch;
    while (true) {
      Status st;
      {
        nb::gil_scoped_release release;
        st = Held().Next(/*timeout_ms=*/50, &ns, &batch);
      }
      if (!st.ok()) {
        if (cursor) epoch_over_ = st.code() == StatusCode::kDataError && Cursor().Failed();
        RaiseStatus(st);
      }
      if (ns == NextStatus::kBatch && batch->size() == 0) continue;  // a shared consumer's
      if (ns != NextStatus::kTimeout) break;
      // Let Ctrl-C through while waiting for a slow batch, and a close()
      // from another thread.
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
      Loader();
    }
    if (ns == NextStatus::kEndOfEpoch) {
      if (cursor) epoch_over_ = Cursor().Ended();
      return nb::none();
    }
    const bool over = cursor ? (epoch_over_ = Cursor().Delivered(batch->index())) : false;
    const auto [memory, memory_bytes] = batch->memory();
    batch_memory_ = {reinterpret_cast<uintptr_t>(memory), memory_bytes};
    const LoaderSpec& spec = Loader().spec();
    std::vector<size_t> shape = {static_cast<size_t>(batch->size())};
    // (A batch of many sizes: its samples padded to its largest, each one's
    // own shape beside them.)
    const std::vector<int64_t> padded = batch->padded_shape();
    const std::vector<int64_t> sample = Loader().SampleShape();
    for (size_t a = 0; a < sample.size(); ++a) {
      shape.push_back(static_cast<size_t>(a < padded.size() ? padded[a] : sample[a]));
    }
    nb::object dims = nb::none();
    if (batch->sample_dims() != nullptr) {
      dims = View(batch, batch->sample_dims(), {static_cast<size_t>(batch->size()), 3}, nb::dtype<int64_t>());
    }
    nb::dlpack::dtype pixel = spec.prep.dtype == DType::kFloat32 ? nb::dtype<float>()
                                                                : nb::dtype<uint8_t>();
    std::vector<size_t> n = {static_cast<size_t>(batch->size())};
    // NumPy arrays: the cheapest export; the package wraps them with
    // torch.from_numpy, which shares the memory (and so the lease).
    return nb::make_tuple(View(batch, batch->images(), shape, pixel),
                          View(batch, batch->labels(), n, nb::dtype<int64_t>()),
                          View(batch, batch->indices(), n, nb::dtype<int64_t>()),
                          batch->copied(), over, Fields(*batch), dims);
  }

  // The batch's extra fields: one list per field (the spec's order) of
  // bytes per sample, None where a sample has none; None without fields.
  nb::object Fields(const Batch& batch) {
    if (extra_fields_ < 0) extra_fields_ = static_cast<int>(ExtraFields(Loader().spec()).size());
    if (extra_fields_ == 0) return nb::none();
    nb::list out;
    for (int f = 0; f < extra_fields_; ++f) {
      nb::list values;
      for (int64_t p = 0; p < batch.size(); ++p) {
        const FieldView v = batch.field(f, p);
        if (v.present()) {
          values.append(nb::bytes(reinterpret_cast<const char*>(v.data), static_cast<size_t>(v.size)));
        } else {
          values.append(nb::none());
        }
      }
      out.append(values);
    }
    return out;
  }

  std::string StatsJson() const { return Loader().Stats().ToJson(); }
  std::string StatsTable() const { return Loader().Stats().ToTable(); }
  std::string SpecJson() const { return Loader().spec().ToJson(); }
  // Tar shards still being indexed as they are read (the buffered first
  // epoch): what needs every item waits for the index, without the GIL,
  // and raises what stopped it.
  void WaitForIndex() const {
    const Use use(this);  // (lets the GIL go: Close waits for it)
    if (Loader().sampler().counts_known()) return;
    Result<int64_t> total = [&] {
      nb::gil_scoped_release release;
      return Held().source().sharded()->Total();
    }();
    if (!total.ok()) RaiseStatus(total.status());
  }
  bool CountsKnown() const { return Loader().sampler().counts_known(); }
  // Prep for another loader (docs/remote.md): the next passes make only
  // `plan`'s batches (None: whole epochs again).
  void SetPlan(std::shared_ptr<BatchPlan> plan) { Loader().sampler().SetPlan(std::move(plan)); }
  // Makes `plan`'s batches from now on, outside the epoch cursor (next_planned() hands them out).
  void StartPlan(std::shared_ptr<BatchPlan> plan) {
    const Use use(this);  // (lets the GIL go: Close waits for it)
    const int64_t epoch = plan->epoch();
    Loader().sampler().SetPlan(std::move(plan));
    Status st;
    {
      nb::gil_scoped_release release;
      st = Held().StartEpoch(epoch, 0);
    }
    RaiseIfError(st);
  }
  // The cursor's next pass, its batches made elsewhere: (epoch, first batch,
  // elastic steps, batches in the epoch).
  nb::tuple BeginElsewhere() {
    const Use use(this);  // (lets the GIL go: Close waits for it)
    Status st;
    {
      nb::gil_scoped_release release;
      st = HeldCursor().Begin(/*start_loader=*/false);
    }
    RaiseIfError(st);
    std::vector<std::pair<int64_t, int64_t>> steps;
    for (const ElasticStep& e : Cursor().elastic()) steps.push_back({e.world_size, e.batch});
    return nb::make_tuple(Cursor().epoch(), Cursor().position(), steps, Cursor().batches_per_epoch());
  }
  // A batch made elsewhere was handed out: true when it ended the epoch.
  void RunInBackground() { RaiseIfError(Loader().RunInBackground()); }
  bool DeliveredElsewhere(int64_t batch) { return epoch_over_ = Cursor().Delivered(batch); }
  bool EndedElsewhere() { return epoch_over_ = Cursor().Ended(); }
  int64_t BatchesPerEpoch() const {
    WaitForIndex();
    return Cursor().batches_per_epoch();  // an elastic epoch's own count
  }
  int64_t SamplesPerEpoch() const {
    WaitForIndex();
    return Loader().sampler().SamplesPerEpoch();
  }
  int64_t NumItems() const {
    WaitForIndex();
    return Loader().source().size();
  }
  std::vector<int64_t> SampleShape() const { return Loader().SampleShape(); }
  // Samples of many sizes: the axes of sample_shape (then its bound) a
  // sample may be smaller on, bit i for axis i; 0: every sample has it.
  uint32_t RaggedAxes() const {
    const PrepSpec& prep = Loader().spec().prep;
    return prep.sample_kind().RaggedAxes(prep);
  }
  // Each item's image id and (height, width) in its annotations (a COCO
  // file's), as int64 arrays, or None where the source has none: the
  // targets' image_id and orig_size.
  nb::object ImageMeta() const {
    WaitForIndex();
    const Source& source = Loader().source();
    const int64_t n = source.size();
    std::vector<int64_t> ids(static_cast<size_t>(n)), sizes(static_cast<size_t>(2 * n));
    for (int64_t i = 0; i < n; ++i) {
      int w = 0, h = 0;
      if (!source.image_id(i, &ids[static_cast<size_t>(i)]) || !source.image_size(i, &w, &h)) return nb::none();
      sizes[static_cast<size_t>(2 * i)] = h;
      sizes[static_cast<size_t>(2 * i + 1)] = w;
    }
    return nb::make_tuple(Owned(std::move(ids), {static_cast<size_t>(n)}),
                          Owned(std::move(sizes), {static_cast<size_t>(n), 2}));
  }
  nb::object Key(int64_t i) const {
    WaitForIndex();
    // (A buffered epoch's early batches name samples by shard and member.)
    const std::shared_ptr<ShardedItems> shards = Loader().source().sharded();
    if (shards != nullptr && IsShardMemberKey(i)) {
      const int64_t s = ShardOfKey(i);
      Result<int64_t> n = s < shards->shard_count() ? shards->Count(s) : Result<int64_t>(int64_t{0});
      if (!n.ok() || MemberOfKey(i) >= n.value()) throw nb::index_error("item index out of range");
      i = shards->Id(s, MemberOfKey(i));  // its number, once the index is whole
    }
    if (i < 0 || i >= Loader().source().size()) throw nb::index_error("item index out of range");
    return PathText(Loader().source().key(i));
  }
  // Class names are folder names: not always UTF-8.
  nb::list Classes() const {
    WaitForIndex();
    nb::list out;
    for (const std::string& c : Loader().source().classes()) out.append(PathText(c));
    return out;
  }
  // The class folders, else the largest label plus one (tar shards' .cls).
  int64_t NumClasses() const {
    WaitForIndex();
    const Source& src = Loader().source();
    if (!src.classes().empty()) return static_cast<int64_t>(src.classes().size());
    int64_t top = -1;
    for (int64_t i = 0; i < src.size(); ++i) top = std::max(top, src.label(i));
    return top + 1;
  }
  uint64_t Fingerprint() const {
    WaitForIndex();
    return Loader().source().fingerprint();
  }
  // (Named by the kind: "not videos nostall reads" for a video folder.)
  std::string LeftOut() const {
    const std::string kind = Loader().spec().prep.sample_kind().name();
    return DescribeLeftOut(Loader().source(), kind == "video" ? "videos" : kind == "audio" ? "audio files" : "images");
  }
  std::string IndexOrigin() const { return Loader().source().index_origin(); }
  std::string IndexNote() const { return Loader().source().index_note(); }
  void EvictPageCache() const {
    const Use use(this);  // (lets the GIL go: Close waits for it)
    Status st;
    {
      nb::gil_scoped_release release;
      st = Held().EvictPageCache();
    }
    if (!st.ok()) RaiseStatus(st);
  }

  // nostall::ProbeLoaderStorageJson (analyze.h).
  std::string ProbeStorage(int64_t sequential, int64_t concurrent, int concurrency) const {
    const Use use(this);  // (lets the GIL go: Close waits for it)
    Result<std::string> r = InvalidArgument("");
    {
      nb::gil_scoped_release release;
      r = ProbeLoaderStorageJson(Held(), sequential, concurrent, concurrency);
    }
    return ValueOrRaise(std::move(r));
  }

  // Stops and joins every thread now (also done by the destructor). A call
  // of another thread that is using the loader with the GIL let go (a
  // next() waiting for its batch) ends first: new calls raise at once, and
  // the loader goes when the last one is out.
  void Close() {
    closed_ = true;
    {
      nb::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(busy_mu_);
      idle_.wait(lock, [this] { return busy_ == 0; });
    }
    std::unique_ptr<EpochCursor> cursor = std::move(cursor_);
    std::unique_ptr<nostall::Loader> loader = std::move(loader_);
    nb::gil_scoped_release release;
    cursor.reset();
    loader.reset();
  }

 private:
  // A call that lets the GIL go while it uses the loader: made with the GIL
  // held (so after a close() it raises), and counted until it returns.
  class Use {
   public:
    explicit Use(const PyLoader* p) : p_(p) {
      p_->Loader();
      std::lock_guard<std::mutex> lock(p_->busy_mu_);
      ++p_->busy_;
    }
    ~Use() {
      std::lock_guard<std::mutex> lock(p_->busy_mu_);
      if (--p_->busy_ == 0) p_->idle_.notify_all();
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    const PyLoader* p_;
  };

  nostall::Loader& Loader() const {
    if (closed_ || !loader_) {
      PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
      throw nb::python_error();
    }
    return *loader_;
  }
  EpochCursor& Cursor() const {
    Loader();  // raises once closed
    return *cursor_;
  }
  // The same within a Use, where the GIL may be let go (no raising there).
  nostall::Loader& Held() const { return *loader_; }
  EpochCursor& HeldCursor() const { return *cursor_; }
  std::unique_ptr<nostall::Loader> loader_;
  std::unique_ptr<EpochCursor> cursor_;  // over loader_
  bool closed_ = false;  // read and set with the GIL held
  mutable std::mutex busy_mu_;
  mutable std::condition_variable idle_;
  mutable int busy_ = 0;  // Use calls under way
  bool epoch_over_ = false;
  std::pair<uintptr_t, size_t> batch_memory_{0, 0};
  int extra_fields_ = -1;  // the spec's extra fields, counted at the first batch
};

std::vector<ElasticStep> StepsOf(const std::vector<std::pair<int64_t, int64_t>>& steps) {
  std::vector<ElasticStep> out;
  for (const auto& [world, batch] : steps) {
    if (world < 1 || batch < 0) throw nb::value_error("elastic steps are (world_size >= 1, batch >= 0)");
    out.push_back({world, batch});
  }
  return out;
}

// The classes, as _nostall.pyi types them.
void BindLoader(nb::module_& m) {
  nb::class_<BatchPlan>(m, "BatchPlan")
      .def("__init__",
           [](BatchPlan* p, int64_t epoch, const std::vector<std::pair<int64_t, int64_t>>& elastic) {
             if (epoch < 0) throw nb::value_error("epoch must be >= 0");
             new (p) BatchPlan(epoch, StepsOf(elastic));
           },
           "epoch"_a, "elastic"_a = std::vector<std::pair<int64_t, int64_t>>{})
      .def("extend", [](BatchPlan& p, const std::vector<int64_t>& batches) { RaiseIfError(p.Extend(batches)); },
           "batches"_a)
      .def("finish", &BatchPlan::Finish)
      .def("__len__", &BatchPlan::size)
      .def_prop_ro("epoch", &BatchPlan::epoch);
  nb::class_<PyLoader>(m, "Loader")
      .def(nb::init<const std::string&>(), "spec_json"_a)
      .def_static("attach", &PyLoader::Attach, "name"_a, "batch_size"_a, "producer_timeout_s"_a,
                  "fallback"_a, "expect_fingerprint"_a, "attach_timeout_s"_a, "expect_spec"_a = "",
                  nb::rv_policy::take_ownership)
      .def("set_epoch", &PyLoader::SetEpoch, "epoch"_a)
      .def("begin", &PyLoader::Begin)
      .def("next", &PyLoader::Next)
      .def("state_json", &PyLoader::StateJson)
      .def("load_state_json", &PyLoader::LoadStateJson, "state_json"_a)
      .def_prop_ro("epoch", &PyLoader::Epoch)
      .def_prop_ro("position", &PyLoader::Position)
      .def_prop_ro("active", &PyLoader::Active)
      .def_prop_ro("epoch_over", &PyLoader::EpochOver)
      .def_prop_ro("batch_memory", &PyLoader::BatchMemory)
      .def("stats_json", &PyLoader::StatsJson)
      .def("stats_table", &PyLoader::StatsTable)
      .def("spec_json", &PyLoader::SpecJson)
      .def("key", &PyLoader::Key)
      .def("close", &PyLoader::Close)
      .def("evict_page_cache", &PyLoader::EvictPageCache)
      .def("probe_storage", &PyLoader::ProbeStorage, "sequential"_a, "concurrent"_a,
           "concurrency"_a)
      .def_prop_ro("batches_per_epoch", &PyLoader::BatchesPerEpoch)
      .def_prop_ro("counts_known", &PyLoader::CountsKnown)
      .def("set_plan", &PyLoader::SetPlan, "plan"_a.none())
      .def("start_plan", &PyLoader::StartPlan, "plan"_a)
      .def("next_planned", &PyLoader::NextPlanned)
      .def("run_in_background", &PyLoader::RunInBackground)
      .def("begin_elsewhere", &PyLoader::BeginElsewhere)
      .def("delivered_elsewhere", &PyLoader::DeliveredElsewhere, "batch"_a)
      .def("ended_elsewhere", &PyLoader::EndedElsewhere)
      .def_prop_ro("num_classes", &PyLoader::NumClasses)
      .def_prop_ro("left_out", &PyLoader::LeftOut)
      .def_prop_ro("index_origin", &PyLoader::IndexOrigin)
      .def_prop_ro("index_note", &PyLoader::IndexNote)
      .def_prop_ro("samples_per_epoch", &PyLoader::SamplesPerEpoch)
      .def_prop_ro("num_items", &PyLoader::NumItems)
      .def_prop_ro("classes", &PyLoader::Classes)
      .def_prop_ro("sample_shape", &PyLoader::SampleShape)
      .def_prop_ro("ragged_axes", &PyLoader::RaggedAxes)
      .def("image_meta", &PyLoader::ImageMeta)
      .def_prop_ro("fingerprint", &PyLoader::Fingerprint);
}

// A profiler trace read once (nostall/trace.h); predictions replay its graph.
struct TraceHandle {
  std::shared_ptr<const trace::Trace> t;
};

void BindTrace(nb::module_& m) {
  nb::class_<TraceHandle>(m, "_Trace")
      .def("facts_json", [](const TraceHandle& h) { return trace::FactsJson(*h.t); })
      .def("simulate_json", [](const TraceHandle& h, const std::string& change_json) {
        trace::Change c = ValueOrRaise(trace::ChangeFromJson(change_json));
        nb::gil_scoped_release release;
        return ValueOrRaise(trace::SimulateJson(*h.t, c));
      });
  m.def("read_trace", [](const std::string& path) {
    Result<std::shared_ptr<const trace::Trace>> r = [&] {
      nb::gil_scoped_release release;
      return trace::Read(path);
    }();
    return TraceHandle{ValueOrRaise(std::move(r))};
  });
}

}  // namespace
}  // namespace nostall

NB_MODULE(_nostall, m) {
  m.doc() = "nostall's native core. Use the `nostall` package, not this module.";
  nostall::py::g_main_thread = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  nostall::SetInterruptCheck(&nostall::py::PythonInterrupted);
  nostall::BindLoader(m);
  nostall::py::BindServer(m);
  m.def("list_shared", &nostall::ListShared);
  m.def("spec_fingerprint", [](const std::string& spec_json) {
    return nostall::SharedSpecFingerprint(
        nostall::ValueOrRaise(nostall::LoaderSpec::FromJson(spec_json)));
  });
  m.def("available_cores", &nostall::AvailableCores);
  // A spec's JSON with the old flat storage fields in the new form, and
  // what was rewritten (Python warns it).
  m.def("upgrade_spec", [](const std::string& spec_json) {
    std::vector<std::string> notes;
    std::string upgraded = nostall::ValueOrRaise(nostall::LoaderSpec::UpgradeJson(spec_json, &notes));
    return std::make_tuple(upgraded, notes);
  });
  m.def("parse_size", [](const std::string& text) -> uint64_t {
    return nostall::ValueOrRaise(nostall::ParseByteSize(text));
  });
  // The spec's transforms with every argument resolved (errors name the
  // transform and the argument), as a JSON list.
  m.def("resolve_transforms", [](const std::string& spec_json) {
    nostall::LoaderSpec spec = nostall::ValueOrRaise(nostall::LoaderSpec::FromJson(spec_json));
    nostall::RaiseIfError(spec.prep.Validate());
    return nlohmann::json::parse(spec.ToJson())["transforms"].dump();
  });
  m.def("image_op_doc", [](const std::string& type) { return std::string(nostall::ImageOpDoc(type)); });
  m.def("transform_schemas", &nostall::TransformSchemasJson);
  m.def("check_transform", [](const std::string& transform_json) {
    return nostall::ValueOrRaise(nostall::CheckTransformJson(transform_json));
  });
  m.def("sample_params", [](const std::string& spec_json, int width, int height, int64_t epoch,
                            int64_t index) {
    nostall::LoaderSpec spec = nostall::ValueOrRaise(nostall::LoaderSpec::FromJson(spec_json));
    return nostall::ValueOrRaise(
        nostall::TraceSampleJson(spec.prep, width, height, spec.seed, epoch, index));
  });
  nostall::py::BindAudio(m);
  nostall::py::BindVideo(m);
  nostall::py::BindDetection(m);
  nostall::BindTrace(m);
  m.attr("__version__") = NOSTALL_VERSION;
  m.def("predict_json", [](const std::string& profile_json, const std::string& config_json) {
    return nostall::ValueOrRaise(nostall::PredictJson(
        nostall::ValueOrRaise(nostall::Profile::FromJson(profile_json)), config_json));
  });
  m.def("predict_with_step_json", [](const std::string& profile_json, const std::string& step_json,
                                     const std::string& config_json) {
    return nostall::ValueOrRaise(nostall::PredictWithStepJson(
        nostall::ValueOrRaise(nostall::Profile::FromJson(profile_json)), step_json, config_json));
  });
  m.def("autotune_start_json", &nostall::AutotuneStartJson, "need"_a, "prep_cpu_s"_a,
        "latency_s"_a, "item_bytes"_a, "cores"_a);
  m.def("analysis_json", [](const std::string& profile_json) {
    return nostall::AnalysisJson(nostall::ValueOrRaise(nostall::Profile::FromJson(profile_json)));
  });
  m.def("remove_cache", [](const std::string& name) {
    nostall::Status st = nostall::MinioCache::Remove(name);
    if (!st.ok()) nostall::RaiseStatus(st);
  });
}
