// CollectiveBucketScope: a thread-local label for the collectives a thread issues (collective_observer.h).
#include "dist/process_group/collective_observer.h"

namespace tinyddp::dist {

namespace {
thread_local int current_bucket = -1;
}  // namespace

CollectiveBucketScope::CollectiveBucketScope(int bucket) : previous_(current_bucket) { current_bucket = bucket; }
CollectiveBucketScope::~CollectiveBucketScope() { current_bucket = previous_; }
int CollectiveBucketScope::Current() { return current_bucket; }

}  // namespace tinyddp::dist
