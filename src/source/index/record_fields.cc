// The fields each sample carries beyond its item and class: selected from
// an index's members (tar shards) or the files beside each image (a
// folder), and the fingerprint of that selection (indexed_source.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <sys/stat.h>

#include <xxhash.h>

#include "source/index/indexed_source.h"

namespace nostall {
namespace {

std::string Joined(const std::vector<std::string>& exts) {
  std::string out;
  for (const std::string& e : exts) out += (out.empty() ? "." : ", .") + e;
  return out;
}

}  // namespace

uint64_t RecordsFingerprint(const IndexView& index, const RecordTable& records) {
  uint64_t h = index.fingerprint();
  auto mix = [&h](const void* p, size_t n) { h = XXH3_64bits_withSeed(p, n, h); };
  // The items kept and their records' spans: a cache of records is not one
  // of images.
  mix(records.kept.data(), records.kept.size() * sizeof(int64_t));
  mix(records.item_span.data(), records.item_span.size() * sizeof(RecordTable::Span));
  if (records.beside.empty()) return h;  // a tar record's span already tells it apart
  mix(records.spans.data(), records.spans.size() * sizeof(FieldSpan));
  for (int32_t ext : records.beside) {
    const std::string name = ext < 0 ? "" : index.member_exts()[static_cast<size_t>(ext)];
    mix(name.data(), name.size());
    mix("/", 1);
  }
  return h;
}

std::string BesideImage(const std::string& image_path, const std::string& ext) {
  return image_path.substr(0, image_path.rfind('.')) + "." + ext;
}

namespace {

// An image folder's fields besides the image and its class: the files
// beside each image (STEM.EXT), whose sizes are taken here, as they are
// when the loader is made (a file edited in place changes no directory's
// stamp, so the index cannot keep them).
Result<RecordTable> SelectFilesBeside(const SourceOptions& options,
                                      const std::vector<const FieldSpec*>& extra,
                                      const IndexView& index) {
  RecordTable t;
  t.extra = static_cast<int>(extra.size());
  t.room.assign(extra.size(), 0);
  std::vector<std::string> lower;  // member_exts as the fields name them
  for (const std::string& e : index.member_exts()) lower.push_back(LowerAscii(e));
  const bool has_members = index.has_members();
  t.spans.reserve(static_cast<size_t>(index.size()) * (1 + extra.size()));
  t.beside.reserve(static_cast<size_t>(index.size()) * extra.size());
  std::vector<FieldSpan> spans(1 + extra.size());
  std::vector<int32_t> picks(extra.size());
  for (int64_t i = 0; i < index.size(); ++i) {
    const std::string image = index.key(i);
    std::string why;
    uint64_t offset = 0;
    for (size_t f = 0; f < extra.size() && why.empty(); ++f) {
      spans[1 + f] = FieldSpan{};
      picks[f] = -1;
      // The first of the field's extensions (preferred first) with a file.
      for (size_t x = 0; x < extra[f]->extensions.size() && picks[f] < 0 && has_members; ++x) {
        for (const IndexView::Member* m = index.members_begin(i); m != index.members_end(i); ++m) {
          struct stat st;
          if (lower[m->ext] == extra[f]->extensions[x] &&
              ::stat(BesideImage(image, index.member_exts()[m->ext]).c_str(), &st) == 0 &&
              S_ISREG(st.st_mode)) {
            picks[f] = static_cast<int32_t>(m->ext);
            spans[1 + f] = {offset, static_cast<int64_t>(st.st_size)};
            break;
          }
        }
      }
      if (picks[f] < 0) {
        if (!extra[f]->optional) {
          why = "field '" + extra[f]->name + "': no " + Joined(extra[f]->extensions) +
                " file beside the image (optional=true gives None instead)";
        }
      } else if (static_cast<uint64_t>(spans[1 + f].size) > options.max_field_bytes) {
        why = "field '" + extra[f]->name + "': " + BesideImage(image, index.member_exts()[picks[f]]) +
              " is " + std::to_string(spans[1 + f].size) + " bytes, over max_field_bytes=" +
              std::to_string(options.max_field_bytes);
      } else {
        offset += static_cast<uint64_t>(spans[1 + f].size);
      }
    }
    if (!why.empty()) {
      if (!options.skip_bad_samples) return DataError(why).WithItem(image, "index");
      ++t.skipped;
      continue;
    }
    spans[0] = {offset, -1};  // the image, read last, to the end
    for (size_t f = 0; f < spans.size(); ++f) {
      t.spans.push_back(spans[f]);
      if (f > 0) t.room[f - 1] = std::max(t.room[f - 1], spans[f].size);
    }
    t.beside.insert(t.beside.end(), picks.begin(), picks.end());
    t.kept.push_back(i);
  }
  if (t.kept.empty()) {
    return NotFound("no image of the folder has every field asked for beside it (" +
                    std::to_string(t.skipped) + " skipped)");
  }
  if (t.skipped == 0) t.kept = {};  // every item, as the index numbers them
  // The files the fields read are no longer left out.
  t.left_out_changed = true;
  t.left_out = index.left_out();
  for (const FieldSpec* f : extra) {
    for (const std::string& x : f->extensions) {
      const std::string last = FileExtension("f." + x);
      auto& left = t.left_out;
      left.erase(std::remove_if(left.begin(), left.end(),
                                [&](const auto& l) { return l.first == last; }),
                 left.end());
    }
  }
  return t;
}

}  // namespace

namespace {

// Each sample's members for the fields asked for, in a shard index with
// members: the image (its first image member if the field takes its
// extension, in the field's order of preference, else another member the
// field names) and each extra field's.
class MemberSelect {
 public:
  MemberSelect(const SourceOptions& options, const IndexView& index, const FieldSpec* image,
               std::vector<const FieldSpec*> extra)
      : options_(options), index_(index), image_(image), extra_(std::move(extra)) {
    image_ids_ = Ids(*image_);
    for (const FieldSpec* f : extra_) extra_ids_.push_back(Ids(*f));
  }

  // Sample i's absolute spans (image first; size -1: none), or why it cannot be read.
  std::string Locate(int64_t i, std::vector<std::pair<uint64_t, int64_t>>* at) const {
    const IndexView::Item& e = index_.item(i);
    std::string sample, main_ext;
    SplitMemberName(std::string(index_.name(i)), &sample, &main_ext);
    (*at)[0] = {0, -1};
    for (size_t k = 0; k < image_->extensions.size() && (*at)[0].second < 0; ++k) {
      if (image_->extensions[k] == main_ext) {
        (*at)[0] = {e.offset, e.size};
      } else if (const IndexView::Member* m = Member(i, image_ids_[k])) {
        (*at)[0] = {m->offset, m->size};
      }
    }
    if ((*at)[0].second < 0) {
      return "field '" + image_->name + "': the sample has no " + Joined(image_->extensions) + " member";
    }
    for (size_t f = 0; f < extra_.size(); ++f) {
      const IndexView::Member* m = Find(i, extra_ids_[f]);
      (*at)[1 + f] = m ? std::make_pair(m->offset, m->size) : std::make_pair(uint64_t{0}, int64_t{-1});
      if (!m && !extra_[f]->optional) {
        return "field '" + extra_[f]->name + "': the sample has no " + Joined(extra_[f]->extensions) +
               " member (optional=true gives None instead)";
      }
      if (m && static_cast<uint64_t>(m->size) > options_.max_field_bytes) {
        return "field '" + extra_[f]->name + "': its member is " + std::to_string(m->size) +
               " bytes, over max_field_bytes=" + std::to_string(options_.max_field_bytes);
      }
    }
    return "";
  }

 private:
  // A field's extensions as member_exts ids (-1: no sample has one).
  std::vector<int64_t> Ids(const FieldSpec& f) const {
    const std::vector<std::string>& exts = index_.member_exts();
    std::vector<int64_t> out;
    for (const std::string& e : f.extensions) {
      auto it = std::find(exts.begin(), exts.end(), e);
      out.push_back(it == exts.end() ? -1 : it - exts.begin());
    }
    return out;
  }
  // The member of item i with extension `id` (-1: none has it).
  const IndexView::Member* Member(int64_t i, int64_t id) const {
    if (!index_.has_members() || id < 0) return nullptr;
    for (const IndexView::Member* m = index_.members_begin(i); m != index_.members_end(i); ++m) {
      if (m->ext == static_cast<uint32_t>(id)) return m;
    }
    return nullptr;
  }
  // The member of item i with one of `want`'s extensions, first preferred.
  const IndexView::Member* Find(int64_t i, const std::vector<int64_t>& want) const {
    for (int64_t id : want) {
      if (const IndexView::Member* m = Member(i, id)) return m;
    }
    return nullptr;
  }

  const SourceOptions& options_;
  const IndexView& index_;
  const FieldSpec* image_;
  std::vector<const FieldSpec*> extra_;
  std::vector<int64_t> image_ids_;
  std::vector<std::vector<int64_t>> extra_ids_;
};

// Sample i's record: its spans relative to the bytes read for it (the
// smallest range holding every member).
void AddRecord(int64_t i, const std::vector<std::pair<uint64_t, int64_t>>& at, RecordTable* t) {
  uint64_t lo = at[0].first, hi = at[0].first + static_cast<uint64_t>(at[0].second);
  for (const auto& [off, size] : at) {
    if (size < 0) continue;
    lo = std::min(lo, off);
    hi = std::max(hi, off + static_cast<uint64_t>(size));
  }
  for (size_t f = 0; f < at.size(); ++f) {
    t->spans.push_back(at[f].second < 0 ? FieldSpan{} : FieldSpan{at[f].first - lo, at[f].second});
    if (f > 0) t->room[f - 1] = std::max(t->room[f - 1], at[f].second);
  }
  t->kept.push_back(i);
  t->item_span.push_back({lo, static_cast<int64_t>(hi - lo)});
}

}  // namespace

Result<RecordTable> SelectFields(const SourceOptions& options, const IndexView& index) {
  RecordTable t;
  if (options.fields.empty()) return t;
  NOSTALL_RETURN_IF_ERROR(ValidateFields(options.fields));
  const FieldSpec* image = nullptr;
  std::vector<const FieldSpec*> extra;
  for (const FieldSpec& f : options.fields) {
    if (IsMediaKind(f.kind)) image = &f;
    if (!IsMediaKind(f.kind) && f.kind != FieldKind::kLabel) extra.push_back(&f);
  }
  if (index.folder()) {
    if (extra.empty()) return t;  // the image and its label, as always
    return SelectFilesBeside(options, extra, index);
  }
  t.extra = static_cast<int>(extra.size());
  t.room.assign(extra.size(), 0);
  t.spans.reserve(static_cast<size_t>(index.size()) * (1 + extra.size()));
  t.item_span.reserve(static_cast<size_t>(index.size()));
  const MemberSelect select(options, index, image, extra);
  std::vector<std::pair<uint64_t, int64_t>> at(1 + extra.size());  // absolute spans
  for (int64_t i = 0; i < index.size(); ++i) {
    const std::string why = select.Locate(i, &at);
    if (why.empty()) {
      AddRecord(i, at, &t);
      continue;
    }
    if (!options.skip_bad_samples) {
      std::string sample, ext;
      SplitMemberName(std::string(index.name(i)), &sample, &ext);
      return DataError(why).WithItem(index.shards()[static_cast<size_t>(index.item(i).container)] + ":" + sample,
                                     "index");
    }
    ++t.skipped;
  }
  if (t.kept.empty()) {
    return NotFound("no sample of the dataset has every field asked for (" + std::to_string(t.skipped) + " skipped)");
  }
  if (t.skipped == 0) t.kept = {};  // every item, as the index numbers them
  return t;
}

}  // namespace nostall
