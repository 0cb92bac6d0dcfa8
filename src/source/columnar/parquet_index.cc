#include "source/columnar/parquet_index.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

namespace nostall::pq {
namespace {

// The fields a dataset gives without fields=: its image column (Hugging
// Face's Image feature first, then by name) and its label, if any.
Result<std::vector<FieldSpec>> DefaultFields(const File& first, const HfFeatures& hf) {
  std::vector<FieldSpec> fields;
  FieldSpec image{"image", {}, FieldKind::kImage};
  if (!hf.image.empty()) image.extensions.push_back(hf.image);
  for (const char* n : {"image", "img", "jpg", "jpeg", "png", "webp"}) image.extensions.push_back(n);
  fields.push_back(image);
  FieldSpec label{"label", {}, FieldKind::kLabel, /*optional=*/true};
  if (hf.class_labels.size() > 1) {
    std::string which;
    for (const auto& [column, _] : hf.class_labels) which += (which.empty() ? "" : ", ") + column;
    return InvalidArgument(first.name() + " has " + std::to_string(hf.class_labels.size()) +
                           " ClassLabel columns (" + which + "): name the label with fields=, e.g. "
                           "{\"image\": \"" + (hf.image.empty() ? "image" : hf.image) + "\", \"label\": \"" +
                           hf.class_labels.rbegin()->first + "\"}");
  }
  if (!hf.class_labels.empty()) label.extensions.push_back(hf.class_labels.begin()->first);
  for (const char* n : {"label", "labels", "cls", "class"}) label.extensions.push_back(n);
  fields.push_back(label);
  return fields;
}

// The column field `f` reads, checked: found, one value per row, bytes for
// an image or audio field. A label not there and optional: leaf -1.
Result<Column> MatchColumn(const File& first, const FieldSpec& f) {
  Column col;
  col.field = f.name;
  col.kind = f.kind;
  col.optional = f.optional;
  const bool is_media = IsMediaKind(f.kind);
  col.name = FindColumn(first, f.extensions, is_media, &col.leaf);
  if (col.name.empty()) {
    if (f.kind == FieldKind::kLabel && f.optional) return col;
    std::string wanted;
    for (const std::string& e : f.extensions) wanted += (wanted.empty() ? "" : " or ") + e;
    return InvalidArgument(first.name() + " has no column " + wanted + " for the field \"" + f.name +
                           "\"; its columns: " + ColumnList(first));
  }
  const std::string which = first.name() + ": the column " + col.name + " for the ";
  if (col.leaf < 0) {
    return InvalidArgument(which + "field \"" + f.name + "\" is a struct or list; nostall reads a column of one "
                           "value per row, or an image/audio struct of {bytes, path}");
  }
  const Leaf& leaf = first.leaves()[static_cast<size_t>(col.leaf)];
  if (leaf.max_rep > 0) {
    return InvalidArgument(which + "field \"" + f.name + "\" is a list; nostall reads columns of one value per row");
  }
  if (f.kind == FieldKind::kTargets) {
    return InvalidArgument("a targets field is read from COCO files or .json members, not Parquet columns yet");
  }
  if (is_media && leaf.physical != 6 /* BYTE_ARRAY */) {
    return InvalidArgument(which + FieldKindName(f.kind) + " field \"" + f.name + "\" holds no bytes (" +
                           leaf.path + ")");
  }
  return col;
}

// File `f`'s labels and extra fields' sizes into `s` (its rows from `base`).
Status ReadRows(const File& f, const ReadAt& read, int64_t base, const FieldColumns& c, bool strings,
                uint64_t max_field_bytes, Saved* s, std::vector<std::string>* names) {
  const Column& label = c.label;
  if (label.leaf >= 0) {
    NOSTALL_RETURN_IF_ERROR(ReadColumn(f, label.leaf, read, [&](const Values& v, int64_t at) {
      for (size_t row = 0; row < v.present.size(); ++row) {
        if (!v.present[row]) {
          return DataError(f.name() + "[" + std::to_string(at + static_cast<int64_t>(row)) + "]: the label (" +
                           label.name + ") is null");
        }
        const size_t item = static_cast<size_t>(base + at) + row;
        if (strings) {
          (*names)[item].assign(v.blob, v.off[row], v.off[row + 1] - v.off[row]);
        } else {
          s->labels[item] = v.ints[row];
        }
      }
      return Status::OK();
    }));
  }
  const int extra = c.extra();
  for (int e = 0; e < extra; ++e) {
    const Column& col = c.columns[static_cast<size_t>(e)];
    NOSTALL_RETURN_IF_ERROR(ReadColumn(f, col.leaf, read, [&](const Values& v, int64_t at) {
      for (size_t row = 0; row < v.present.size(); ++row) {
        const std::string where = f.name() + "[" + std::to_string(at + static_cast<int64_t>(row)) + "]";
        if (!v.present[row] && !col.optional) {
          return DataError(where + ": the field \"" + col.field + "\" (" + col.name +
                           ") is null; say optional=True to take it as None");
        }
        const int64_t n = v.present[row] ? static_cast<int64_t>(v.off[row + 1] - v.off[row]) : -1;
        if (n > static_cast<int64_t>(max_field_bytes)) {
          return DataError(where + ": the field \"" + col.field + "\" is " + std::to_string(n) +
                           " bytes, over max_field_bytes");
        }
        s->sizes[static_cast<size_t>(base + at + static_cast<int64_t>(row)) * extra + e] = n;
      }
      return Status::OK();
    }));
  }
  return Status::OK();
}

// The classes: string labels' distinct values in order (each label its
// place), or the label column's ClassLabel names (each value checked).
Status ResolveClasses(const IndexFiles& in, const FieldColumns& c, const HfFeatures& hf, bool strings,
                      const std::vector<std::string>& names, Saved* s) {
  if (strings) {
    std::set<std::string> distinct(names.begin(), names.end());
    s->classes.assign(distinct.begin(), distinct.end());
    for (size_t r = 0; r < names.size(); ++r) {
      s->labels[r] = std::lower_bound(s->classes.begin(), s->classes.end(), names[r]) - s->classes.begin();
    }
    return Status::OK();
  }
  if (c.label.leaf < 0 || hf.class_labels.count(c.label.name) == 0) return Status::OK();
  s->classes = hf.class_labels.at(c.label.name);
  // A ClassLabel's values index its names; -1 is Hugging Face's "no
  // label" (test splits). Anything else names no class.
  const int64_t n = static_cast<int64_t>(s->classes.size());
  for (size_t r = 0; r < s->labels.size(); ++r) {
    const int64_t v = s->labels[r];
    if (v == -1 || (v >= 0 && v < n)) continue;
    const std::vector<int64_t>& first = in.file_first;
    const size_t k = static_cast<size_t>(
        std::upper_bound(first.begin(), first.end(), static_cast<int64_t>(r)) - first.begin() - 1);
    return DataError((*in.files)[k]->name() + "[" + std::to_string(static_cast<int64_t>(r) - first[k]) +
                     "]: the label (" + c.label.name + ") is " + std::to_string(v) + ", but its ClassLabel has " +
                     std::to_string(n) + " names (0 to " + std::to_string(n - 1) + ", or -1 for none)");
  }
  return Status::OK();
}

}  // namespace

Status ForEachFile(size_t n, size_t threads, const std::function<Status(size_t)>& fn) {
  std::vector<Status> failed(n);
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (size_t t = 0; t < std::min(n, threads); ++t) {
    pool.emplace_back([&] {
      for (size_t k; (k = next.fetch_add(1)) < n;) failed[k] = fn(k);
    });
  }
  for (auto& t : pool) t.join();
  for (Status& s : failed) NOSTALL_RETURN_IF_ERROR(s);
  return Status::OK();
}

Result<FieldColumns> ResolveColumns(const File& first, const std::vector<FieldSpec>& asked, const HfFeatures& hf) {
  std::vector<FieldSpec> fields = asked;
  if (fields.empty()) {
    NOSTALL_ASSIGN_OR_RETURN(fields, DefaultFields(first, hf));
  }
  FieldColumns out;
  Column media;
  for (const FieldSpec& f : fields) {
    NOSTALL_ASSIGN_OR_RETURN(Column col, MatchColumn(first, f));
    if (col.leaf < 0) continue;  // an optional label not there
    if (IsMediaKind(f.kind)) {
      media = col;
    } else if (f.kind == FieldKind::kLabel) {
      out.label = col;
    } else {
      out.columns.push_back(col);
    }
  }
  if (media.leaf < 0) return InvalidArgument("a Parquet dataset needs an image or audio field");
  out.columns.push_back(media);
  return out;
}

Status CheckSameColumns(const std::vector<std::shared_ptr<File>>& files, const FieldColumns& c) {
  const File& first = *files.front();
  std::vector<int> leaves;
  for (const Column& col : c.columns) leaves.push_back(col.leaf);
  if (c.label.leaf >= 0) leaves.push_back(c.label.leaf);
  for (const auto& f : files) {
    for (int leaf : leaves) {
      const Leaf& want = first.leaves()[static_cast<size_t>(leaf)];
      const int here = f->FindLeaf(want.path);
      if (here != leaf || f->leaves()[static_cast<size_t>(here)].physical != want.physical) {
        return InvalidArgument(f->name() + ": its schema differs from " + first.name() + "'s: column " + want.path +
                               (here < 0 ? " is missing" : " has another place or type"));
      }
    }
  }
  return Status::OK();
}

Result<Saved> BuildIndex(const IndexFiles& in, const FieldColumns& c, const HfFeatures& hf) {
  const std::vector<std::shared_ptr<File>>& files = *in.files;
  const File& first = *files.front();
  const int extra = c.extra();
  std::vector<int> per_item;
  for (const Column& col : c.columns) per_item.push_back(col.leaf);
  Saved s;
  s.footers.resize(files.size());
  s.index_at.resize(files.size());
  s.indexes.resize(files.size());
  s.labels.assign(c.label.leaf >= 0 ? static_cast<size_t>(in.total) : 0, 0);
  s.sizes.assign(static_cast<size_t>(in.total) * static_cast<size_t>(extra), -1);
  const Leaf* label_leaf = c.label.leaf >= 0 ? &first.leaves()[static_cast<size_t>(c.label.leaf)] : nullptr;
  const bool strings = label_leaf != nullptr && label_leaf->physical == 6;
  if (label_leaf != nullptr && !strings && label_leaf->physical != 1 && label_leaf->physical != 2 &&
      label_leaf->physical != 0) {
    return InvalidArgument(first.name() + ": the label column " + c.label.name + " holds neither integers nor strings");
  }
  std::vector<std::string> names(strings ? static_cast<size_t>(in.total) : 0);
  // Per file, at once: its offset indexes, its labels, its fields' sizes.
  NOSTALL_RETURN_IF_ERROR(ForEachFile(files.size(), in.threads, [&](size_t k) -> Status {
    File& f = *files[k];
    const ReadAt read = in.reader(k);
    s.footers[k] = f.footer();
    NOSTALL_RETURN_IF_ERROR(f.ReadOffsetIndexes(per_item, read, &s.indexes[k], &s.index_at[k]));
    return ReadRows(f, read, in.file_first[k], c, strings, in.max_field_bytes, &s, &names);
  }));
  NOSTALL_RETURN_IF_ERROR(ResolveClasses(in, c, hf, strings, names, &s));
  return s;
}

}  // namespace nostall::pq
