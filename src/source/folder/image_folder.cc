// The image-folder driver: one subfolder per class, classes sorted by name,
// .jpg/.jpeg/.png files found recursively, as torchvision's ImageFolder does.
// The index is a directory walk; each item is a whole file.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "source/driver.h"
#include "source/local_options.h"
#include "source/index/index_progress.h"
#include "source/index/indexed_source.h"

namespace nostall {
namespace {

struct WalkState {
  // Directories already walked, and the dataset's root and class folders:
  // each is walked once, as itself, so a symlink back up the tree (a loop)
  // or into another class is not followed and nothing is counted twice.
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<IndexStamp>* stamps;
  std::map<std::string, int64_t> left_out;  // files that are not images, by extension
  // The files that are not images, by directory: what a sample's fields
  // may take from beside its image (STEM.EXT).
  std::map<std::string, std::vector<std::string>> others;
  Media media = Media::kImage;  // what the items are
};

// Collects (dir, file) pairs under `dir`, following symlinks like os.walk
// with followlinks=True, but into no directory walked already (or reserved:
// the root and the class folders). `top`: `dir` is a class folder itself.
Status Walk(const std::string& dir, bool top, WalkState* ws,
            std::vector<std::pair<std::string, std::string>>* files) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoError("cannot stat " + dir, errno);
  if (!ws->seen.insert({st.st_dev, st.st_ino}).second && !top) return Status::OK();
  ws->stamps->push_back(StampOf(dir, st, -1));
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoError("cannot list " + dir, errno);
  std::vector<std::string> subdirs;
  while (dirent* ent = ::readdir(d)) {
    std::string name = ent->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    bool is_dir = ent->d_type == DT_DIR;
    if (ent->d_type == DT_LNK || ent->d_type == DT_UNKNOWN) {
      struct stat lst;
      is_dir = ::stat(path.c_str(), &lst) == 0 && S_ISDIR(lst.st_mode);
    }
    if (is_dir) {
      subdirs.push_back(path);
    } else if (IsMediaFileName(name, ws->media)) {
      files->emplace_back(dir, name);
    } else {
      ++ws->left_out[FileExtension(name)];
      ws->others[dir].push_back(name);
    }
  }
  ::closedir(d);
  for (const std::string& sub : subdirs) NOSTALL_RETURN_IF_ERROR(Walk(sub, false, ws, files));
  return Status::OK();
}

// Each image's files beside it, named STEM.EXT where STEM is the image's
// name less its extension (img1.jpg: img1.json, img1.cap.txt), as members
// of its sample: EXT as the file name has it, offset 0, size -1 (their
// sizes are taken when a spec's fields ask for them: SelectFields).
void KeepFilesBeside(std::map<std::string, std::vector<std::string>>* others, Index* index) {
  for (auto& [dir, names] : *others) std::sort(names.begin(), names.end());
  std::map<std::string, uint32_t> ext_ids;
  std::vector<IndexMember> members;
  std::vector<uint32_t> begin = {0};
  for (const IndexEntry& e : index->items) {
    const size_t slash = e.key.rfind('/');
    const std::string name = e.key.substr(slash + 1);
    auto it = others->find(e.key.substr(0, slash));
    if (it != others->end()) {
      const std::string prefix = name.substr(0, name.rfind('.')) + ".";
      const std::vector<std::string>& names = it->second;
      for (auto n = std::lower_bound(names.begin(), names.end(), prefix);
           n != names.end() && n->compare(0, prefix.size(), prefix) == 0; ++n) {
        const std::string ext = n->substr(prefix.size());
        auto [id, added] = ext_ids.emplace(ext, static_cast<uint32_t>(index->member_exts.size()));
        if (added) index->member_exts.push_back(ext);
        members.push_back({id->second, 0, -1});
      }
    }
    begin.push_back(static_cast<uint32_t>(members.size()));
  }
  if (members.empty()) return;
  index->members = std::move(members);
  index->member_begin = std::move(begin);
}

Result<Index> BuildFolderIndex(const std::string& root, Media media) {
  Index index;
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return ErrnoError("cannot list dataset folder " + root, errno);
  std::string columns;  // a file of rows in columns, for the error below
  while (dirent* ent = ::readdir(d)) {
    std::string name = ent->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (::stat((root + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      index.classes.push_back(name);
    } else if (columns.empty() && (name.ends_with(".parquet") || name.ends_with(".arrow"))) {
      columns = name;
    }
  }
  ::closedir(d);
  // Byte order, as Python's sorted() orders str (torchvision's find_classes).
  std::sort(index.classes.begin(), index.classes.end());
  if (index.classes.empty()) {
    return NotFound("no class folders in " + root +
                    " (expected one subfolder per class, as torchvision's ImageFolder)" +
                    (columns.empty() ? ""
                                     : "; it holds " + columns + ": read its files with a pattern, " + root +
                                           (columns.ends_with(".arrow") ? "/*.arrow" : "/*.parquet") +
                                           " (docs/parquet.md)"));
  }
  struct stat rst;
  ::stat(root.c_str(), &rst);
  index.stamps.push_back(StampOf(root, rst, -1));
  WalkState ws{{}, &index.stamps};
  ws.media = media;
  ws.seen.insert({rst.st_dev, rst.st_ino});
  for (const std::string& cls : index.classes) {
    struct stat cst;
    if (::stat((root + "/" + cls).c_str(), &cst) == 0) ws.seen.insert({cst.st_dev, cst.st_ino});
  }
  IndexProgress progress(root, "class folders", static_cast<int64_t>(index.classes.size()));
  for (size_t c = 0; c < index.classes.size(); ++c) {
    std::vector<std::pair<std::string, std::string>> files;
    NOSTALL_RETURN_IF_ERROR(Walk(root + "/" + index.classes[c], /*top=*/true, &ws, &files));
    if (files.empty()) {
      return NotFound("class folder " + root + "/" + index.classes[c] +
                      " has no image file (.jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, "
                      ".webp)");
    }
    std::sort(files.begin(), files.end());
    for (auto& [dir, name] : files) {
      index.items.push_back({dir + "/" + name, static_cast<int64_t>(c), -1, 0, -1});
    }
    progress.Done(0, static_cast<int64_t>(files.size()));
  }
  index.left_out.assign(ws.left_out.begin(), ws.left_out.end());
  KeepFilesBeside(&ws.others, &index);
  return index;
}

std::string WithoutTrailingSlashes(std::string uri) {
  while (uri.size() > 1 && uri.back() == '/') uri.pop_back();
  return uri;
}

bool FolderClaims(const std::string& uri) {
  struct stat st;
  return !uri.empty() && ::stat(WithoutTrailingSlashes(uri).c_str(), &st) == 0 &&
         S_ISDIR(st.st_mode);
}

Result<std::unique_ptr<Source>> FolderOpen(const std::string& uri, const SourceOptions& options) {
  std::string root =
      std::filesystem::absolute(WithoutTrailingSlashes(uri)).lexically_normal().string();
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  // (The index cache's key names what the index holds: since "beside", the
  // files beside each image too.)
  // The folder's index is the same whatever the error policy: built
  // strictest.
  // An audio (video) folder's index (its items the audio (video) files) is
  // its own.
  const Media media = MediaOf(options);
  const std::string suffix = MediaSuffix(media);  // " audio", " video", ""
  return OpenIndexed({"image-folder", root + "\nbeside" + (suffix.empty() ? "" : "\n" + suffix.substr(1)), root,
                      root + "/" + kIndexBesideName, "raise" + suffix,
                      [&] { return BuildFolderIndex(root, media); }},
                     options);
}

}  // namespace

SourceDriver ImageFolderDriver() { return {"image-folder", FolderClaims, FolderOpen, ResolveImageFolderOptions}; }

}  // namespace nostall
