// The audio transforms, one definition each: its schema (schemas.cc: the
// arguments, declared once, from which the Python classes and the docs'
// table are generated), how SpecFromJson resolves a spec's entry of it
// (spec.cc) and how a sample runs it (pipeline.cc). A new audio transform is
// its OpKind, its schema, its two functions and its line in OpDefs().
#ifndef NOSTALL_AUDIO_OPS_H_
#define NOSTALL_AUDIO_OPS_H_

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "audio/pipeline.h"
#include "ops/schema.h"

namespace nostall::audio {

// Every audio transform's schema, in the order docs/audio.md lists them.
const std::vector<OpSchema>& AudioSchemas();
const OpSchema* FindAudioSchema(const std::string& name);
// What the generator reads (SchemasJson of AudioSchemas()).
std::string AudioSchemasJson();

// One spec entry's arguments read through its schema: the type, the
// default and the range of each come from there; the value given (else the
// default) is written back resolved. Unknown keys are an error listing the
// schema's.
class Args {
 public:
  Args(const nlohmann::json& j, std::string where, const OpSchema& schema);
  Status Error(const std::string& msg) const { return InvalidArgument(where_ + ": " + msg); }
  const std::string& where() const { return where_; }
  // The value given, null when absent or None (an argument of type kAny,
  // or one read with its own rules: then Record it).
  const nlohmann::json* Get(const char* key);
  Status Double(const char* key, double* out);
  // A kFloat whose default is None: *given false (and null written back)
  // when absent or None.
  Status OptionalDouble(const char* key, double* out, bool* given);
  // A kInt; one whose default is None reads as 0 when absent or None.
  Status Int(const char* key, int64_t* out);
  Status Bool(const char* key, bool* out);
  // A kChoice; None (null) reads as "" where the schema allows it.
  Status Choice(const char* key, std::string* out);
  // A kRange: x as [-|x|, |x|], or a pair [lo, hi], within the schema's range.
  Status Range(const char* key, double* lo, double* hi);
  void Record(const char* key, nlohmann::json v);
  Status Done() const;
  nlohmann::json resolved() const { return resolved_; }

 private:
  const ArgSchema& Declared(const char* key) const;
  static std::string Num(double x);
  const nlohmann::json& j_;
  std::string where_;
  const OpSchema& schema_;
  std::set<std::string> seen_;
  nlohmann::json resolved_ = nlohmann::json::object();
};

// What the audio is at a point of the list, as SpecFromJson follows it:
// rate (0 unknown), frames (0 varies), channels (0 each file's), bins (0: a
// waveform).
struct Chain {
  int rate = 0;
  int channels = 1;
  int bins = 0;
  int64_t frames = 0;
  // Where frames vary: the most seconds of audio there may be (Decode's
  // max_seconds, lengthened by the slowest SpeedPerturbation), and, once a
  // spectrogram, the most frames (0: unknown, the rate not known there).
  double seconds = 0;
  int64_t bound = 0;
};

struct OpDef {
  OpKind kind;
  const char* name;
  // Reads `a` into `op` (and `spec`, for Decode), following `chain`.
  Status (*resolve)(Args& a, Chain& chain, Spec* spec, Op* op);
};

// Every audio transform, in OpKind's order.
const std::vector<OpDef>& OpDefs();
const OpDef* FindOpDef(const std::string& name);

}  // namespace nostall::audio

#endif  // NOSTALL_AUDIO_OPS_H_
