// DataLoader: a producer thread, a bounded queue, and (for CUDA) pinned staging + async copies.
#include "data/data_loader.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "data/internal/batch_pool.h"
#include "tensor/cuda_device.h"

namespace tinyddp::data {

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(std::shared_ptr<const Dataset> dataset,
                                                               DistributedSampler sampler,
                                                               const DataLoaderOptions& options) {
  if (dataset == nullptr) return absl::InvalidArgumentError("DataLoader: no dataset");
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("DataLoader: batch_size must be >= 1, got ", options.batch_size));
  }
  if (options.prefetch_depth < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: prefetch_depth must be >= 1, got ", options.prefetch_depth));
  }
  if (sampler.dataset_size() != dataset->Size()) {
    return absl::InvalidArgumentError(absl::StrCat("DataLoader: the sampler was built for ", sampler.dataset_size(),
                                                   " examples but the dataset has ", dataset->Size()));
  }
  if (options.device.is_cuda() && (options.device.index < 0 || options.device.index >= cuda::DeviceCount())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DataLoader: device ", options.device.ToString(), " is not available (", cuda::DeviceCount(),
        " GPUs visible", cuda::BuiltWithCuda() ? "" : "; this binary was built without CUDA", ")"));
  }
  return std::unique_ptr<DataLoader>(new DataLoader(std::move(dataset), std::move(sampler), options));
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler,
                       const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  pool_ = internal::BatchPool::Create(options_.device, {options_.batch_size, dataset_->input_size()});
  if (options_.device.is_cuda()) {
    copy_stream_ = cuda::Stream::Create(options_.device.index);
    // depth batches may sit in the queue while the worker fills one more.
    host_ring_ = std::vector<HostBuffer>(options_.prefetch_depth + 1);  // Events do not move: build in place
    for (HostBuffer& h : host_ring_) h.storage = AllocatePinnedStorage(pool_->layout().nbytes());
  }
}

DataLoader::~DataLoader() {
  StopWorker();  // also drops unconsumed batches, returning their slots to the pool
  // Teardown only: the pinned buffers die with us, and a copy may still be reading one.
  if (options_.device.is_cuda()) copy_stream_.Synchronize();
}

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_.num_samples(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t DataLoader::num_buffers_created() const { return pool_->num_slots(); }

void DataLoader::StopWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  room_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::deque<Item> abandoned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandoned.swap(queue_);
    stop_ = false;
    worker_done_ = false;
  }
  // `abandoned` dies here, outside the lock: returning a slot takes the pool's lock, never ours.
}

void DataLoader::Reset(int64_t epoch) {
  StopWorker();
  sampler_.SetEpoch(epoch);
  status_ = absl::OkStatus();
  started_ = true;
  next_batch_ = 0;
  worker_ = std::thread(&DataLoader::Work, this, sampler_.Indices());
}

std::optional<Batch> DataLoader::Next() {
  std::optional<Item> item = Pop();
  if (!item) return std::nullopt;
  if (options_.device.is_cuda()) {
    // The batch's copy ran on our side stream; order the consumer's stream after it. No host wait.
    cuda::Stream::Current(options_.device.index).Wait(item->slot->ready);
  }
  return std::move(item->batch);
}

int64_t DataLoader::NextInto(Tensor& inputs, Tensor& labels) {
  const int64_t b = options_.batch_size, d = dataset_->input_size();
  const bool fits = inputs.defined() && labels.defined() && inputs.dtype() == DType::kFloat32 &&
                    labels.dtype() == DType::kInt64 && inputs.device() == options_.device &&
                    labels.device() == options_.device && inputs.dim() == 2 && inputs.size(0) == b &&
                    inputs.size(1) == d && labels.dim() == 1 && labels.size(0) == b;
  if (!fits) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        "DataLoader::NextInto: the buffers must be float32 [", b, ", ", d, "] and int64 [", b, "] on ",
        options_.device.ToString(), ", got ", inputs.defined() ? inputs.ToString() : "undefined", " and ",
        labels.defined() ? labels.ToString() : "undefined"));
    return 0;
  }
  std::optional<Item> item = Pop();
  if (!item) return 0;
  const Batch& batch = item->batch;
  const int64_t rows = batch.size();
  if (options_.device.is_cpu()) {
    CopyBytes(inputs.data_ptr(), Device::CPU(), batch.inputs.data_ptr(), Device::CPU(), batch.inputs.nbytes());
    CopyBytes(labels.data_ptr(), Device::CPU(), batch.labels.data_ptr(), Device::CPU(), batch.labels.nbytes());
    return rows;
  }
  // GPU: the buffers may still be read by the step queued last; the copy stream waits for it (and is
  // already behind the batch's own host-to-device copy, which ran there), copies, and the consumer's
  // stream waits for the copy. The batch's slot is released after this, on the consumer's stream, which is
  // by then behind the copy that read it.
  const cuda::Stream consumer = cuda::Stream::Current(options_.device.index);
  static_free_.Record(consumer);
  copy_stream_.Wait(static_free_);
  cuda::MemcpyAsync(inputs.data_ptr(), batch.inputs.data_ptr(), batch.inputs.nbytes(), cuda::CopyKind::kDeviceToDevice,
                    copy_stream_.handle());
  cuda::MemcpyAsync(labels.data_ptr(), batch.labels.data_ptr(), batch.labels.nbytes(), cuda::CopyKind::kDeviceToDevice,
                    copy_stream_.handle());
  static_ready_.Record(copy_stream_);
  consumer.Wait(static_ready_);
  return rows;
}

std::optional<DataLoader::Item> DataLoader::Pop() {
  if (!started_) {
    status_ = absl::FailedPreconditionError("DataLoader::Next: call Reset(epoch) before the first Next()");
    return std::nullopt;
  }
  if (!status_.ok()) return std::nullopt;
  Item item;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const bool ready = ready_cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.timeout),
                                          [&] { return !queue_.empty() || worker_done_; });
    if (!ready) {
      status_ = absl::DeadlineExceededError(
          absl::StrCat("DataLoader::Next: batch ", next_batch_, " of ", num_batches(), " not ready after ",
                       absl::FormatDuration(options_.timeout), " (is the dataset stuck?)"));
      return std::nullopt;
    }
    if (queue_.empty()) return std::nullopt;  // the worker finished: end of the epoch
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  room_cv_.notify_one();
  if (!item.status.ok()) {
    status_ = item.status;
    return std::nullopt;
  }
  ++next_batch_;
  return item;
}

void DataLoader::Work(std::vector<int64_t> indices) {
  if (options_.device.is_cuda()) cuda::SetDevice(options_.device.index);
  const int64_t b = options_.batch_size;
  const int64_t total = num_batches();
  for (int64_t k = 0; k < total; ++k) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_cv_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < options_.prefetch_depth; });
      if (stop_) return;
    }
    const int64_t begin = k * b;
    const int64_t end = std::min<int64_t>(begin + b, indices.size());
    absl::StatusOr<Item> item;
    try {
      item = Produce(absl::MakeConstSpan(indices).subspan(begin, end - begin), k);
    } catch (const std::exception& e) {
      item = absl::InternalError(absl::StrCat("DataLoader worker: exception while producing batch ", k, ": ",
                                              e.what()));
    }
    if (!item.ok()) {
      // Reported in order: the consumer receives the batches before this one, then the error.
      Push(Item{Batch{}, nullptr, absl::Status(item.status().code(),
                                               absl::StrCat("DataLoader: batch ", k, ": ", item.status().message()))});
      break;
    }
    if (item->slot == nullptr) return;  // asked to stop while waiting for a copy
    Push(*std::move(item));
  }
  std::lock_guard<std::mutex> lock(mu_);
  worker_done_ = true;
  ready_cv_.notify_all();
}

void DataLoader::Push(Item item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(item));
  }
  ready_cv_.notify_one();
}

absl::StatusOr<DataLoader::Item> DataLoader::Produce(absl::Span<const int64_t> indices, int64_t batch_number) {
  const int64_t rows = indices.size();
  std::shared_ptr<internal::BatchSlot> slot = pool_->Acquire();
  Item item{pool_->Lend(slot, rows), slot, absl::OkStatus()};
  if (options_.device.is_cpu()) {
    // On the CPU the slot is the batch: gather straight into it.
    RETURN_IF_ERROR(dataset_->GetBatchInto(indices, item.batch.inputs, item.batch.labels));
    return item;
  }

  // CUDA: gather into the pinned buffer whose previous copy has finished, then one async copy.
  HostBuffer& host = host_ring_[batch_number % host_ring_.size()];
  if (!WaitUntilCopied(host.copied)) return Item{};
  Batch staged = pool_->layout().View(host.storage, rows);
  RETURN_IF_ERROR(dataset_->GetBatchInto(indices, staged.inputs, staged.labels));
  // The slot may still be read by kernels the consumer queued on an earlier batch: wait for them on the
  // GPU (the event recorded when that batch died), not on the host.
  copy_stream_.Wait(slot->released);
  cuda::MemcpyAsync(slot->storage->data(), host.storage->data(), pool_->layout().nbytes(),
                    cuda::CopyKind::kHostToDevice, copy_stream_.handle());
  host.copied.Record(copy_stream_);
  slot->ready.Record(copy_stream_);
  return item;
}

// Polls rather than blocking in cudaEventSynchronize, so a Reset() or the destructor can stop the worker
// even while a copy is held up behind the consumer's GPU work.
bool DataLoader::WaitUntilCopied(const cuda::Event& event) {
  while (!event.Query()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

}  // namespace tinyddp::data
