// Loader specs of the flat form, read in the new one.
//
// Before each driver owned its part of the spec, the storage fields sat at
// the top level: throttle_bandwidth, throttle_latency_ms and
// drop_page_cache (the local drivers'), s3_endpoint, s3_region, s3_profile,
// s3_addressing and s3_unsigned (the S3 drivers'), and cache_name,
// cache_bytes, cache_policy, cache_servers and cache_local_bytes (the
// cache's). Saved specs and scripts still hold them: they are read, a note
// says so (LoaderSpec::notes, which Python warns and the CLI prints), and
// ToJson writes the new form. The list is closed: a new option goes to its
// driver, never here.
#ifndef NOSTALL_PIPELINE_SPEC_LEGACY_H_
#define NOSTALL_PIPELINE_SPEC_LEGACY_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nostall/status.h"

namespace nostall {

// Rewrites the flat fields of `spec` (a JSON object) into "source":
// {"uri", "options"} and "cache": [tiers], adding one line to `notes` when
// there were any. A flat field at its old default that does not apply to the
// source (throttle_bandwidth: 0 for an s3:// dataset, as old specs wrote
// every field) is dropped; one set to something else is an error naming it,
// as is a field given both ways.
Status UpgradeFlatFields(nlohmann::json* spec, std::vector<std::string>* notes);

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_SPEC_LEGACY_H_
