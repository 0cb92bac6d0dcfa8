// The epoch cursor (nostall/epoch_cursor.h).
#include "nostall/epoch_cursor.h"

namespace nostall {

EpochCursor::EpochCursor(Loader* loader, std::string shared_name)
    : loader_(loader), shared_(std::move(shared_name)) {}

int64_t EpochCursor::batches_per_epoch() const {
  // (After an epoch's last batch: the next one's count.)
  const bool next = !epoch_set_ && !resume_ && finished_ == epoch_;
  return loader_->sampler().BatchesInEpoch(next ? epoch_ + 1 : epoch_);
}

Status EpochCursor::SetEpoch(int64_t epoch) {
  if (epoch < 0) return InvalidArgument("epoch must be >= 0");
  if (active_ && epoch == epoch_ && finished_ != epoch) {  // the running one: it runs on
    named_running_ = true;  // (and a new pass after it is abandoned runs it again)
    return Status::OK();
  }
  epoch_ = epoch;
  epoch_set_ = true;
  return Status::OK();
}

Status EpochCursor::Begin(bool start_loader) {
  if (!epoch_set_) {
    if (finished_ == epoch_) {
      ++epoch_;  // the pass after a finished epoch
    } else if (active_ && handed_ == 0) {
      if (began_at_) resume_ = began_at_;  // a pass that handed out nothing: again, where it began
    } else if (active_ && !named_running_) {
      ++epoch_;  // after a pass abandoned part-way: the next epoch, as a DataLoader's new order
    }  // (SetEpoch named the abandoned epoch: it again, from its start)
  }
  int64_t start = 0;
  std::optional<StreamPosition> at;
  if (resume_ && resume_->epoch == epoch_) {
    start = resume_->batch;
    if (start > 0) at = resume_->stream_position;
  }
  // A loaded elastic state's epoch holds what its ranks left (sampler.h);
  // any other pass runs a whole epoch.
  elastic_.clear();
  if (resume_ && resume_->epoch == epoch_) elastic_ = resume_->elastic;
  if (shared_.empty()) NOSTALL_RETURN_IF_ERROR(loader_->sampler().SetElastic(epoch_, elastic_));
  began_at_ = start > 0 || !elastic_.empty() ? resume_ : std::nullopt;
  resume_.reset();
  active_ = false;
  if (start_loader) NOSTALL_RETURN_IF_ERROR(loader_->Resume(epoch_, start, at));
  position_ = start;
  handed_ = 0;
  named_running_ = false;
  active_ = true;
  epoch_set_ = false;
  finished_.reset();  // this pass has not handed out its last batch
  return Status::OK();
}

bool EpochCursor::Delivered(int64_t batch_index) {
  // A consumer's batches are numbered in the stream; its own count is its position.
  position_ = shared_.empty() ? batch_index + 1 : position_ + 1;
  ++handed_;
  return NoteEnd();
}

bool EpochCursor::Failed() {
  ++position_;  // that batch is consumed; iteration may go on
  ++handed_;
  return NoteEnd();
}

bool EpochCursor::Ended() {
  active_ = false;
  if (finished_ == epoch_) return false;
  finished_ = epoch_;
  return true;
}

// After the epoch's last batch the epoch is over, whether or not the caller
// asks for the end.
bool EpochCursor::NoteEnd() {
  // (While shards are being indexed as read, the count is not known, and
  // the epoch's last batch is not yet made: its order ends only once every
  // shard is in.)
  if (!loader_->sampler().counts_known()) return false;
  if (position_ < batches_per_epoch() || finished_ == epoch_) return false;
  finished_ = epoch_;
  return true;
}

Result<std::string> EpochCursor::StateJson() const {
  int64_t epoch = epoch_, batch = 0;
  if (resume_) {  // loaded, not yet begun
    epoch = resume_->epoch;
    batch = resume_->batch;
  } else if (epoch_set_) {  // SetEpoch chose what the next Begin runs
    batch = 0;
  } else if (finished_ == epoch_) {  // its last batch was handed out
    epoch = epoch_ + 1;
  } else if (active_) {
    batch = position_;
  }
  std::vector<ElasticStep> elastic;
  if (resume_) {
    elastic = resume_->elastic;
  } else if (active_ && batch > 0 && epoch == epoch_) {
    elastic = elastic_;
  }
  return ResumeStateJson(*loader_, epoch, batch, shared_, elastic);
}

// Whether rank 0 (the rank with the most) has batches left of the elastic
// epoch the state resumes.
bool EpochCursor::RankZeroHasBatches(const ResumePoint& p) const {
  SamplerOptions o = loader_->sampler().options();
  if (o.rank == 0) return false;
  o.rank = 0;
  Result<Sampler> zero = Sampler::Create(o);
  if (!zero.ok()) return false;
  const Sampler& z = zero.value();
  if (loader_->source().sharded() != nullptr && !z.SetBufferedEpoch(p.buffered_epoch).ok()) return false;
  return z.SetElastic(p.epoch, p.elastic).ok() && z.BatchesInEpoch(p.epoch) > 0;
}

Status EpochCursor::LoadStateJson(const std::string& state) {
  NOSTALL_ASSIGN_OR_RETURN(ResumePoint p, CheckResumeState(*loader_, !shared_.empty(), state));
  // The epochs run as they ran before (a buffered one buffered again).
  if (shared_.empty() && loader_->source().sharded() != nullptr) {
    NOSTALL_RETURN_IF_ERROR(loader_->sampler().SetBufferedEpoch(p.buffered_epoch));
  }
  if (shared_.empty()) {
    NOSTALL_RETURN_IF_ERROR(loader_->sampler().SetElastic(p.epoch, p.elastic));
    if (!p.elastic.empty() && loader_->sampler().BatchesInEpoch(p.epoch) == 0 && !RankZeroHasBatches(p)) {
      // Its ranks had read all of it but the padding: the next epoch. (Where
      // rank 0 has batches left, as with pad_ranks=False, this rank reads an
      // empty rest of the epoch, as the others read theirs.)
      NOSTALL_RETURN_IF_ERROR(loader_->sampler().SetElastic(p.epoch, {}));
      p = ResumePoint{p.epoch + 1, 0, std::nullopt, p.buffered_epoch, {}};
    }
  }
  epoch_ = p.epoch;
  epoch_set_ = true;
  resume_ = p;
  active_ = false;
  finished_.reset();
  return Status::OK();
}

}  // namespace nostall
