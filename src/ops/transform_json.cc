// A spec's transform entries <-> Transform, each read through its schema
// (schema.h): the geometry and Normalize here, the ops by their factories.
#include <cmath>

#include "nostall/transforms.h"
#include "ops/op.h"

namespace nostall {

using json = nlohmann::json;

namespace {


Status ReadNumbers(OpArgs& args, const char* key, std::vector<double>* out) {
  const json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw(key, &v));
  bool ok = v->is_array() && !v->empty();
  for (size_t i = 0; ok && i < v->size(); ++i) {
    ok = (*v)[i].is_number() && std::isfinite((*v)[i].get<double>());
  }
  if (!ok) return args.Error(std::string(key) + " must be a list of numbers, not " + Shown(*v));
  *out = v->get<std::vector<double>>();
  return Status::OK();
}

Status ReadGeometry(const std::string& type, OpArgs& args, Transform* t) {
  if (type == "RandomResizedCrop") {
    t->kind = TransformKind::kRandomResizedCrop;
    NOSTALL_RETURN_IF_ERROR(ReadSize(args, false, t));
    NOSTALL_RETURN_IF_ERROR(args.Pair("scale", &t->scale_min, &t->scale_max));
    return args.Pair("ratio", &t->ratio_min, &t->ratio_max);
  }
  if (type == "Resize") {
    t->kind = TransformKind::kResize;
    NOSTALL_RETURN_IF_ERROR(ReadSize(args, true, t));
    const json* m = nullptr;
    NOSTALL_RETURN_IF_ERROR(args.Raw("max_size", &m));
    if (m != nullptr) {
      if (!m->is_number_integer() || m->get<int64_t>() < 0 || m->get<int64_t>() > kMaxSide) {
        return args.Error("max_size must be an integer in [0, " + std::to_string(kMaxSide) +
                          "], not " + Shown(*m));
      }
      t->max_size = m->get<int>();
    }
    // As torchvision: max_size bounds the longer edge of a resize by the
    // smaller one, and must leave room for it.
    if (t->max_size > 0 && t->short_side <= 0) {
      return args.Error("max_size needs size to be one number (the smaller edge), as "
                        "torchvision's Resize");
    }
    if (t->max_size > 0 && t->max_size <= t->short_side) {
      return args.Error("max_size = " + std::to_string(t->max_size) + " must be strictly greater "
                        "than the requested size for the smaller edge size = " +
                        std::to_string(t->short_side));
    }
    return Status::OK();
  }
  if (type == "CenterCrop") {
    t->kind = TransformKind::kCenterCrop;
    return ReadSize(args, false, t);
  }
  if (type == "RandomHorizontalFlip") {
    t->kind = TransformKind::kRandomHorizontalFlip;
    return args.Double("p", &t->p);
  }
  t->kind = TransformKind::kNormalize;
  NOSTALL_RETURN_IF_ERROR(ReadNumbers(args, "mean", &t->mean));
  NOSTALL_RETURN_IF_ERROR(ReadNumbers(args, "std", &t->std));
  if (t->mean.size() != t->std.size()) return args.Error("mean and std need the same length");
  for (double s : t->std) {
    if (!(s > 0)) return args.Error("std must be positive");
  }
  return Status::OK();
}

}  // namespace

bool IsSide(const nlohmann::json& v) {
  return v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= kMaxSide;
}

ArgSchema SizeArg(const char* doc) {
  return Required(AnyArg("size", nullptr, "int | tuple[int, int]", doc));
}

ArgSchema Bilinear() {
  return AcceptedOnly(ChoiceArg("interpolation", "bilinear", {"bilinear"},
                                "bilinear only: nostall resamples bilinear, antialiased, as "
                                "torchvision on PIL images (InterpolationMode.BILINEAR, the "
                                "default)"));
}

ArgSchema Antialias() {
  return AcceptedOnly(BoolArg("antialias", true,
                              "True only: nostall always antialiases, as torchvision does on PIL "
                              "images"));
}

// "size": one number (height = width) or [height, width]; a Resize's one
// number is its smaller edge.
Status ReadSize(OpArgs& args, bool one_is_short_side, Transform* t) {
  const json* s = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw("size", &s));
  if (IsSide(*s)) {
    if (one_is_short_side) {
      t->short_side = s->get<int>();
    } else {
      t->height = t->width = s->get<int>();
    }
  } else if (s->is_array() && s->size() == 1 && IsSide((*s)[0]) && !one_is_short_side) {
    t->height = t->width = (*s)[0].get<int>();
  } else if (s->is_array() && s->size() == 2 && IsSide((*s)[0]) && IsSide((*s)[1])) {
    t->height = (*s)[0].get<int>();
    t->width = (*s)[1].get<int>();
  } else {
    return args.Error("size must be an integer or [height, width] in [1, " +
                      std::to_string(kMaxSide) + "], not " + Shown(*s));
  }
  return Status::OK();
}

DType DefaultDType(const nlohmann::json& transforms) {
  if (!transforms.is_array()) return DType::kUint8;
  for (const nlohmann::json& t : transforms) {
    if (t.is_object() && t.value("type", nlohmann::json()) == "Normalize") return DType::kFloat32;
  }
  return DType::kUint8;
}

const std::string& TransformName(const Transform& t) {
  static const std::string names[] = {"RandomResizedCrop", "Resize", "CenterCrop",
                                      "RandomHorizontalFlip", "Normalize"};
  if (t.schema != nullptr) return t.schema->name;
  if (t.kind == TransformKind::kOp) return t.op_name;
  return names[static_cast<int>(t.kind)];
}

const OpSchema& SchemaOf(const Transform& t) {
  if (t.schema != nullptr) return *t.schema;
  const OpSchema* schema = FindTransformSchema(TransformName(t));
  static const OpSchema unknown{"?", "", {}};
  return schema != nullptr ? *schema : unknown;
}

std::vector<OpSchema> GeometrySchemas() {
  return {
      {"RandomResizedCrop",
       "Crop a random area and aspect ratio, then resize to size (torchvision's algorithm: the "
       "area drawn in scale, the aspect log-uniformly in ratio, ten tries then a center crop; "
       "bilinear and antialiased, as on PIL images).",
       {SizeArg("an int (square) or (height, width)"),
        PairArg("scale", 0.08, 1.0, 1e-9, 1, "the crop's area, as a fraction of the image's"),
        PairArg("ratio", 3.0 / 4.0, 4.0 / 3.0, 1e-9, 1e9, "the crop's aspect ratio"),
        Bilinear(), Antialias()},
       OpRole::kGeometry, true},
      {"Resize",
       "Resize: an int sets the smaller edge (aspect kept), (h, w) sets both; bilinear and "
       "antialiased, as on PIL images.",
       {SizeArg("the smaller edge, or (height, width)"), Bilinear(),
        AnyArg("max_size", nullptr, "int | None",
               "a cap on the longer edge (with an int size only), as torchvision's"),
        Antialias()},
       OpRole::kGeometry, true},
      {"CenterCrop",
       "Crop the center size out of the image; an image smaller than size is a DataError naming "
       "it, where torchvision would pad it with zeros: put a Resize first.",
       {SizeArg("an int (square) or (height, width)")},
       OpRole::kGeometry, true},
      {"RandomHorizontalFlip", "Flip the sample left to right with probability p, drawn per sample.",
       {FloatArg("p", 0.5, 0, 1, "the probability a sample is flipped")},
       OpRole::kGeometry, true},
      {"Normalize",
       "(x / 255 - mean) / std per channel, as ToTensor + Normalize; gives float32. Ops on the "
       "normalised tensor (RandomErasing) come after it.",
       {Required(AnyArg("mean", nullptr, "Sequence[float]", "per channel, in [0, 1] units")),
        Required(AnyArg("std", nullptr, "Sequence[float]", "per channel, positive")),
        Ignored(BoolArg("inplace", false,
                             "accepted as torchvision's; nostall writes each batch once"))},
       OpRole::kNormalize},
  };
}

Result<Transform> TransformFromJson(const json& j, size_t position) {
  const std::string at = "transforms[" + std::to_string(position) + "]";
  if (!j.is_object()) {
    return InvalidArgument(at + " must be an object such as {\"type\": \"CenterCrop\", "
                           "\"size\": 224}, not " + Shown(j));
  }
  if (!j.contains("type") || !j["type"].is_string()) {
    return InvalidArgument(at + " needs a \"type\" string (RandomResizedCrop, Resize, "
                           "CenterCrop, RandomHorizontalFlip, Normalize, " + ImageOpNames() + ")");
  }
  const std::string type = j["type"].get<std::string>();
  const OpSchema* schema = FindTransformSchema(type);
  if (schema == nullptr) {
    return InvalidArgument(at + ": unknown transform '" + type +
                           "' (known: RandomResizedCrop, Resize, CenterCrop, "
                           "RandomHorizontalFlip, Normalize, " + ImageOpNames() + ")");
  }
  if (IsBoxTransform(type)) {
    return InvalidArgument(at + ": " + type + " works on boxes: it belongs in a detection spec's "
                           "transforms (a dataset with annotations, e.g. nostall.datasets.Coco; "
                           "docs/detection.md)");
  }
  OpArgs args(j, at + " (" + type + "): ", *schema);
  NOSTALL_RETURN_IF_ERROR(args.CheckNoOthers());
  Transform t;
  if (OpFactory make = FindImageOp(type)) {
    NOSTALL_ASSIGN_OR_RETURN(t.op, make(args));
    t.kind = TransformKind::kOp;
    t.op_name = type;
    t.op_args = args.resolved().dump();
  } else {
    NOSTALL_RETURN_IF_ERROR(ReadGeometry(type, args, &t));
  }
  t.schema = schema;
  return t;
}

Result<std::string> CheckTransformJson(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("a transform is a JSON object: ") + e.what());
  }
  if (j.is_object() && j.contains("type") && j["type"].is_string() &&
      IsBoxTransform(j["type"].get<std::string>())) {
    // Checked by its schema alone (the detection spec reads it: src/detect).
    const std::string type = j["type"].get<std::string>();
    OpArgs args(j, type + ": ", *FindTransformSchema(type));
    for (const ArgSchema& a : FindTransformSchema(type)->args) {
      if (a.accepted_only || a.ignored) continue;
      double d, lo, hi;
      int n;
      std::vector<double> fill;
      const json* raw;
      switch (a.type) {
        case ArgType::kFloat: NOSTALL_RETURN_IF_ERROR(args.Double(a.name.c_str(), &d)); break;
        case ArgType::kInt: NOSTALL_RETURN_IF_ERROR(args.Int(a.name.c_str(), &n)); break;
        case ArgType::kPair: NOSTALL_RETURN_IF_ERROR(args.Pair(a.name.c_str(), &lo, &hi)); break;
        case ArgType::kFill: NOSTALL_RETURN_IF_ERROR(args.Fill(a.name.c_str(), &fill)); break;
        default:
          NOSTALL_RETURN_IF_ERROR(args.Raw(a.name.c_str(), &raw));
          args.Record(a.name.c_str(), raw ? *raw : a.def);
          break;
      }
    }
    NOSTALL_RETURN_IF_ERROR(args.CheckNoOthers());
    json out = {{"type", type}};
    out.update(args.resolved());
    return out.dump();
  }
  NOSTALL_ASSIGN_OR_RETURN(Transform t, TransformFromJson(j, 0));
  return TransformToJson(t).dump();
}

json TransformToJson(const Transform& t) {
  if (t.kind == TransformKind::kOp) {
    json j = {{"type", t.op_name}};
    j.update(json::parse(t.op_args));
    return j;
  }
  json j = {{"type", TransformName(t)}};
  switch (t.kind) {
    case TransformKind::kRandomResizedCrop:
      j["size"] = {t.height, t.width};
      j["scale"] = {t.scale_min, t.scale_max};
      j["ratio"] = {t.ratio_min, t.ratio_max};
      break;
    case TransformKind::kResize:
      if (t.short_side > 0) {
        j["size"] = t.short_side;
      } else {
        j["size"] = {t.height, t.width};
      }
      if (t.max_size > 0) j["max_size"] = t.max_size;
      break;
    case TransformKind::kCenterCrop: j["size"] = {t.height, t.width}; break;
    case TransformKind::kRandomHorizontalFlip: j["p"] = t.p; break;
    case TransformKind::kNormalize:
      j["mean"] = t.mean;
      j["std"] = t.std;
      break;
    case TransformKind::kOp: break;
  }
  return j;
}

}  // namespace nostall
