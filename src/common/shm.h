// POSIX shared-memory segments, fully reserved at creation.
#ifndef NOSTALL_COMMON_SHM_H_
#define NOSTALL_COMMON_SHM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/fd.h"
#include "nostall/status.h"

namespace nostall {

// Makes a freshly created shared-memory fd exactly 0600 and reserves `size`
// bytes of it (posix_fallocate). Too little /dev/shm is a ResourceExhausted
// naming `what` (e.g. "the batch ring"), what is needed, what is free, and
// `hint`; it is checked before fallocate so that an impossible request does
// not first touch (and give back) gigabytes.
Status ReserveShm(int fd, uint64_t size, const std::string& what, const std::string& hint);

// Whose a named segment is. Names are per user: NAME is the caller's own
// (/nostall-shared-UID-NAME), "OWNER:NAME" another user's (OWNER a user
// name or a uid), which that user shares through a group (`serve --group`).
// Another user cannot take a name from the caller: the uid is in it, and a
// segment under it that is not the caller's is refused, naming its owner.
struct SegmentRef {
  unsigned owner = 0;  // uid
  bool others = false;  // owned by another user than the caller
  std::string name;     // NAME, without the owner
};
// Splits "OWNER:NAME"; a plain NAME is the caller's (geteuid()).
Result<SegmentRef> ParseSegmentRef(const std::string& text);
// "/" + prefix + "-" + uid + "-" + name, e.g. /nostall-shared-1000-train.
std::string SegmentPath(const std::string& prefix, const SegmentRef& ref);

// What may be mapped: a segment owned by `owner` that no one outside its
// owner and group can open (mode & 007 == 0; a group is given access only
// by its owner, `serve --group`). Anything else is a PermissionDenied
// naming the segment, its owner and mode, and what to do.
Status CheckSegmentOwner(int fd, unsigned owner, const std::string& seg_name, const std::string& what);

// What a nostall segment starts with: 8 bytes of magic (written last by its
// creator), then a u32 format version.
struct SegmentKind {
  const char* magic = nullptr;  // 8 bytes
  uint32_t version = 0;
  size_t header_bytes = 0;      // a segment is at least this big
  std::string what;             // e.g. "shared loader 'train'": named in errors
  std::string not_ours;         // the error when the magic is wrong
  std::string fix;              // what to do about another version
  std::string seg_name;         // "/nostall-shared-1000-train": named in ownership errors
  unsigned owner = 0;           // the uid that must own it (CheckSegmentOwner)
};

// Maps the existing segment open as `fd` (read-write or read-only) and
// checks, before reading a byte of it, that it is `kind.owner`'s and closed
// to others (CheckSegmentOwner), then that it is of `kind`: big enough for the header, the magic, the
// version (another one is an error naming both). With `wait`, a creator
// still sizing it or writing its header is waited for (about 2 s at most).
// Geometry beyond the header is the caller's to check.
Result<Mapping> MapNostallSegment(int fd, bool writable, bool wait, const SegmentKind& kind);

// Bytes free in /dev/shm (0 if unknown).
uint64_t ShmBytesFree();
// MemAvailable from /proc/meminfo, in bytes (0 if unknown).
uint64_t MemoryAvailable();
// The check ReserveShm makes before reserving: `size` must fit both the free
// space of /dev/shm and the memory available (less a margin for the
// processes), since /dev/shm may be larger than RAM. 0 = unknown, unchecked.
Status CheckShmRoom(uint64_t size, uint64_t shm_free, uint64_t mem_available,
                    const std::string& what, const std::string& hint);
std::string FormatBytes(uint64_t bytes);

}  // namespace nostall

#endif  // NOSTALL_COMMON_SHM_H_
