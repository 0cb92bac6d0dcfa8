// Transform schemas: the builders and the registry's list (schema.h).
#include "ops/schema.h"

#include <cmath>

#include "ops/op.h"

namespace nostall {

using json = nlohmann::json;

const ArgSchema* OpSchema::Find(const std::string& key) const {
  for (const ArgSchema& a : args) {
    if (a.name == key) return &a;
  }
  return nullptr;
}

namespace {
ArgSchema Arg(std::string name, ArgType type, json def, std::string py, std::string doc) {
  ArgSchema a;
  a.name = std::move(name);
  a.type = type;
  a.def = std::move(def);
  a.py = std::move(py);
  a.doc = std::move(doc);
  return a;
}
}  // namespace

ArgSchema FloatArg(std::string name, double def, double lo, double hi, std::string doc) {
  ArgSchema a = Arg(std::move(name), ArgType::kFloat, def, "float", std::move(doc));
  a.lo = lo;
  a.hi = hi;
  return a;
}

ArgSchema IntArg(std::string name, int64_t def, int64_t lo, int64_t hi, std::string doc) {
  ArgSchema a = Arg(std::move(name), ArgType::kInt, def, "int", std::move(doc));
  a.lo = static_cast<double>(lo);
  a.hi = static_cast<double>(hi);
  return a;
}

ArgSchema BoolArg(std::string name, bool def, std::string doc) {
  return Arg(std::move(name), ArgType::kBool, def, "bool", std::move(doc));
}

ArgSchema RangeArg(std::string name, double center, double lo, double hi, std::string doc) {
  ArgSchema a = Arg(std::move(name), ArgType::kRange, 0, "float | tuple[float, float]",
                    std::move(doc));
  a.center = center;
  a.lo = lo;
  a.hi = hi;
  return a;
}

ArgSchema PairArg(std::string name, double def_min, double def_max, double lo, double hi,
                  std::string doc) {
  ArgSchema a = Arg(std::move(name), ArgType::kPair, json::array({def_min, def_max}),
                    "tuple[float, float]", std::move(doc));
  a.lo = lo;
  a.hi = hi;
  return a;
}

ArgSchema FillArg(std::string name, json def, std::string doc) {
  return Arg(std::move(name), ArgType::kFill, std::move(def), "float | Sequence[float] | None",
             std::move(doc));
}

ArgSchema ChoiceArg(std::string name, std::string def, std::vector<std::string> choices,
                    std::string doc) {
  ArgSchema a = Arg(std::move(name), ArgType::kChoice, def, "str", std::move(doc));
  a.choices = std::move(choices);
  return a;
}

ArgSchema AnyArg(std::string name, json def, std::string py, std::string doc) {
  return Arg(std::move(name), ArgType::kAny, std::move(def), std::move(py), std::move(doc));
}

ArgSchema Required(ArgSchema arg) {
  arg.required = true;
  arg.def = nullptr;
  return arg;
}

ArgSchema AcceptedOnly(ArgSchema arg) {
  arg.accepted_only = true;
  return arg;
}

ArgSchema Ignored(ArgSchema arg) {
  arg.ignored = true;
  return arg;
}

ArgSchema Nullable(ArgSchema arg) {
  arg.nullable = true;
  return arg;
}

ArgSchema Default(ArgSchema arg, json def) {
  arg.def = std::move(def);
  return arg;
}

const std::vector<OpSchema>& TransformSchemas() {
  static const std::vector<OpSchema> all = [] {
    std::vector<OpSchema> v = GeometrySchemas();
    for (OpSchema& s : BoxSchemas()) v.push_back(std::move(s));
#define NOSTALL_IMAGE_OP_SCHEMA(name) v.push_back(name##Schema());
    NOSTALL_IMAGE_OPS(NOSTALL_IMAGE_OP_SCHEMA)
#undef NOSTALL_IMAGE_OP_SCHEMA
    return v;
  }();
  return all;
}

const OpSchema* FindTransformSchema(const std::string& name) {
  for (const OpSchema& s : TransformSchemas()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

namespace {
const char* TypeName(ArgType t) {
  switch (t) {
    case ArgType::kFloat: return "float";
    case ArgType::kInt: return "int";
    case ArgType::kBool: return "bool";
    case ArgType::kRange: return "range";
    case ArgType::kPair: return "pair";
    case ArgType::kFill: return "fill";
    case ArgType::kChoice: return "choice";
    case ArgType::kAny: return "any";
  }
  return "?";
}

json Bound(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
}  // namespace

const char* OpRoleName(OpRole role) {
  switch (role) {
    case OpRole::kGeometry: return "geometry";
    case OpRole::kPixels: return "pixels";
    case OpRole::kNormalize: return "normalize";
    case OpRole::kTensor: return "tensor";
    case OpRole::kBoxes: return "boxes";
    case OpRole::kAudioDecode: return "decode";
    case OpRole::kWaveform: return "waveform";
    case OpRole::kFeatures: return "features";
    case OpRole::kSpectrum: return "spectrum";
  }
  return "?";
}

std::string TransformSchemasJson() { return SchemasJson(TransformSchemas()); }

std::string SchemasJson(const std::vector<OpSchema>& schemas) {
  json out = json::array();
  for (const OpSchema& s : schemas) {
    json args = json::array();
    for (const ArgSchema& a : s.args) {
      args.push_back({{"name", a.name}, {"type", TypeName(a.type)}, {"default", a.def},
                      {"required", a.required}, {"lo", Bound(a.lo)}, {"hi", Bound(a.hi)},
                      {"choices", a.choices}, {"py", a.py}, {"doc", a.doc},
                      {"accepted_only", a.accepted_only}, {"ignored", a.ignored},
                      {"nullable", a.nullable}});
    }
    out.push_back({{"name", s.name}, {"doc", s.doc}, {"args", args}, {"role", OpRoleName(s.role)},
                   {"moves_pixels", s.moves_pixels}, {"needs_boxes", s.needs_boxes}});
  }
  return out.dump();
}

}  // namespace nostall
