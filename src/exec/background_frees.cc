#include "background_frees.h"

namespace loom::exec::detail {

BackgroundFrees& BackgroundFrees::instance() {
  static BackgroundFrees frees;
  return frees;
}

BackgroundFrees::BackgroundFrees() : worker_([this] { run(); }) {}

BackgroundFrees::~BackgroundFrees() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  worker_.join();
}

void BackgroundFrees::free(std::shared_ptr<void> object) {
  {
    const std::lock_guard lock(mutex_);
    queue_.push_back(std::move(object));
  }
  wake_.notify_one();
}

void BackgroundFrees::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything freed
    std::shared_ptr<void> object = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    object.reset();  // the frees, outside the lock
    lock.lock();
  }
}

}  // namespace loom::exec::detail
