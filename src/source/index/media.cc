// What a dataset's items are: the image, audio and video extensions, a
// file's extension, and which index variant serves which (indexed_source.h).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "source/index/indexed_source.h"

namespace nostall {

std::string LowerAscii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const std::vector<std::string>& ImageExtensions() {
  // torchvision's IMG_EXTENSIONS (ImageFolder's default), every one decoded.
  static const std::vector<std::string> kExtensions = {"jpg", "jpeg", "png", "ppm", "bmp",
                                                       "pgm", "tif", "tiff", "webp"};
  return kExtensions;
}

std::string FileExtension(const std::string& name) {
  const size_t slash = name.find_last_of('/');
  const size_t dot = name.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return LowerAscii(name.substr(dot + 1));
}

bool IsImageExtension(const std::string& ext) {
  const std::string lower = LowerAscii(ext);
  const auto& all = ImageExtensions();
  return std::find(all.begin(), all.end(), lower) != all.end();
}

bool IsImageFileName(const std::string& name) { return IsImageExtension(FileExtension(name)); }

bool IsAudioExtension(const std::string& ext) {
  const std::string lower = LowerAscii(ext);
  return lower == "wav" || lower == "flac" || lower == "mp3" || lower == "ogg" || lower == "opus";
}

bool IsVideoExtension(const std::string& ext) {
  const std::string lower = LowerAscii(ext);
  static const std::array<std::string_view, 14> kVideo = {"mp4", "mkv", "webm", "avi", "mov", "m4v", "mpg",
                                                          "mpeg", "ts", "m2ts", "flv", "ogv", "3gp", "wmv"};
  return std::find(kVideo.begin(), kVideo.end(), lower) != kVideo.end();
}

bool IsMediaExtension(const std::string& ext, Media media) {
  switch (media) {
    case Media::kAudio: return IsAudioExtension(ext);
    case Media::kVideo: return IsVideoExtension(ext);
    case Media::kImage: break;
  }
  return IsImageExtension(ext);
}

bool IsMediaFileName(const std::string& name, Media media) {
  return IsMediaExtension(FileExtension(name), media);
}

Media MediaOf(const SourceOptions& options) {
  for (const FieldSpec& f : options.fields) {
    if (f.kind == FieldKind::kAudio) return Media::kAudio;
    if (f.kind == FieldKind::kVideo) return Media::kVideo;
  }
  return Media::kImage;
}

const char* MediaSuffix(Media media) {
  return media == Media::kAudio ? " audio" : media == Media::kVideo ? " video" : "";
}

bool VariantServes(const std::string& built, const std::string& wanted) {
  // An index of audio (video) items serves only audio (video), and one of
  // images only images; within each, the strictest build ("raise") serves
  // every policy.
  auto media = [](const std::string& v) -> std::string {
    for (const std::string s : {" audio", " video"}) {
      if (v.size() >= s.size() && v.compare(v.size() - s.size(), s.size(), s) == 0) return s;
    }
    return "";
  };
  if (media(built) != media(wanted)) return false;
  const std::string b = built.substr(0, built.size() - media(built).size());
  return built == wanted || b == "raise";
}

}  // namespace nostall
