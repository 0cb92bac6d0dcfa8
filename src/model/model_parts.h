// What the model's terms and JSON the analyzer (src/analyze/) builds on.
// Private to the library.
#ifndef NOSTALL_MODEL_MODEL_PARTS_H_
#define NOSTALL_MODEL_MODEL_PARTS_H_

#include <nlohmann/json.hpp>

#include "nostall/model.h"

namespace nostall {

// Busy threads may outnumber the cores by this much (a step that sleeps on
// the device still shows a trace of CPU) before the cores count as crowded.
inline constexpr double kCrowdSlack = 0.05;

// The fraction of items found in the cache: a node-local cache holds its
// fraction; a cluster cache pools every node's.
double HitRate(const Config& c);

// Seconds one read from storage takes: latency + bytes / bandwidth.
double ReadTime(const Profile& p, const Config& c);

// Whether `reads` in flight would be what the loader ends up with anyway.
bool AdaptiveGives(const Profile& p, const Config& c, int reads);

nlohmann::json ConfigToJson(const Config& c);
// `c` with the fields `j` names replaced (the names ConfigToJson writes).
Config ConfigFromJson(const nlohmann::json& j, Config c = {});
nlohmann::json PredictionJson(const Prediction& p);
// One point of a what-if curve: x, the rate, its limit and bottleneck.
nlohmann::json Point(double x, const Prediction& p);

}  // namespace nostall

#endif  // NOSTALL_MODEL_MODEL_PARTS_H_
