// nostall.serve's producer (_nostall.Server): a pipeline serving in a
// background thread of this process, or (fed) the chunks Python writes in,
// made by prep on other machines (nostall.ray).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "nostall/loader.h"
#include "nostall/shared.h"
#include "python/binding.h"

namespace nostall::py {
namespace {

using namespace nb::literals;

class PyServer {
 public:
  PyServer(const std::string& name, const std::string& spec_json, int64_t chunk, int max_consumers,
           int slots, double max_lag_s, int64_t block_chunks, bool verbose, bool fed) {
    LoaderSpec spec = ValueOrRaise(LoaderSpec::FromJson(spec_json));
    ServeOptions o;
    o.chunk = chunk;
    o.max_consumers = max_consumers;
    o.slots = slots;
    o.max_lag_s = max_lag_s;
    o.block_chunks = block_chunks;
    o.verbose = verbose;
    o.fed = fed;
    Result<std::unique_ptr<SharedProducer>> r = [&] {
      nb::gil_scoped_release release;
      return SharedProducer::Create(name, spec, o);
    }();
    producer_ = ValueOrRaise(std::move(r));
    thread_ = std::thread([this] {
      result_ = producer_->Run(stop_);
      done_.store(true);
    });
  }
  // Never raises (a destructor that throws, during unwinding or not, ends
  // the process): what stopped the producer early is raised by close().
  ~PyServer() { Stop(); }

  std::string StatusJson() const {
    if (!producer_) return "{}";
    return producer_->Snapshot().ToJson(!finished(), producer_->PipelineStats());
  }
  bool finished() const { return done_.load(); }
  std::string SpecJson() const { return producer_ ? producer_->spec().ToJson() : "{}"; }

  // A fed producer: writes chunk `chunk` of `epoch` (images (n, ...) of the
  // served sample shape and dtype, labels and indices (n,) int64) into the
  // next free slot and publishes it. False: no slot came free within
  // `timeout_s` (consumers hold them all), or the server stops.
  bool Feed(nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> images,
            nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> labels,
            nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> indices, int64_t epoch,
            int64_t chunk, double timeout_s) {
    if (!producer_) throw nb::value_error("the server is closed");
    const int64_t n = static_cast<int64_t>(labels.shape(0));
    if (static_cast<int64_t>(indices.shape(0)) != n || images.ndim() < 1 ||
        static_cast<int64_t>(images.shape(0)) != n) {
      throw nb::value_error("a chunk's images, labels and indices hold one count of samples");
    }
    FedSlot slot;
    Result<bool> got = [&] {
      nb::gil_scoped_release release;
      return producer_->NextSlot(timeout_s, stop_, &slot);
    }();
    if (!ValueOrRaise(std::move(got))) return false;
    if (n < 1 || n > slot.chunk || images.nbytes() != static_cast<size_t>(n) * slot.sample_bytes) {
      const Status misfit = InvalidArgument(
          "a chunk of " + std::to_string(n) + " samples of " +
          std::to_string(n > 0 ? images.nbytes() / static_cast<size_t>(n) : 0) + " bytes does not fit the served slots (" +
          std::to_string(slot.chunk) + " samples of " + std::to_string(slot.sample_bytes) + " bytes)");
      producer_->Fail(misfit);  // the consumers are told, as the caller is
      RaiseStatus(misfit);
    }
    {
      nb::gil_scoped_release release;
      std::memcpy(slot.images, images.data(), images.nbytes());
      std::memcpy(slot.labels, labels.data(), static_cast<size_t>(n) * sizeof(int64_t));
      std::memcpy(slot.indices, indices.data(), static_cast<size_t>(n) * sizeof(int64_t));
    }
    RaiseIfError(producer_->Publish(slot, n, epoch, chunk));
    return true;
  }

  // A fed producer's chunks stopped coming (`message`): consumers are told.
  void Fail(const std::string& message) {
    if (producer_) producer_->Fail(DataError(message));
  }

  // Stops serving, joins, removes the segment; raises what stopped it early.
  void Close() {
    if (!producer_) return;
    Stop();
    if (!result_.ok()) RaiseStatus(result_);
  }

 private:
  void Stop() {
    if (!producer_) return;
    nb::gil_scoped_release release;
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    producer_.reset();
  }

  std::unique_ptr<SharedProducer> producer_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  Status result_;
  std::thread thread_;
};

}  // namespace

void BindServer(nb::module_& m) {
  nb::class_<PyServer>(m, "Server")
      .def(nb::init<const std::string&, const std::string&, int64_t, int, int, double, int64_t, bool, bool>(),
           "name"_a, "spec_json"_a, "chunk"_a, "max_consumers"_a, "slots"_a, "max_lag_s"_a, "block_chunks"_a,
           "verbose"_a, "fed"_a = false)
      .def("status_json", &PyServer::StatusJson)
      .def("spec_json", &PyServer::SpecJson)
      .def("feed", &PyServer::Feed, "images"_a, "labels"_a, "indices"_a, "epoch"_a, "chunk"_a, "timeout_s"_a)
      .def("fail", &PyServer::Fail, "message"_a)
      .def("close", &PyServer::Close);
}

}  // namespace nostall::py
