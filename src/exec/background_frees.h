// Private to exec: frees large objects on another thread. A 64-device materialization leaves maps of
// hundreds of thousands of small nodes (the Materializer's buffers by piece, its need groups): ~0.2 s of
// frees that nothing after it waits for, while the plan's check runs on.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace loom::exec::detail {

class BackgroundFrees {
 public:
  // The process's one worker, drained and joined when static objects are destroyed at exit.
  static BackgroundFrees& instance();
  // Destroys `object` on the worker, soon; the object must not refer to anything the caller frees first.
  void free(std::shared_ptr<void> object);
  BackgroundFrees(const BackgroundFrees&) = delete;
  BackgroundFrees& operator=(const BackgroundFrees&) = delete;
  ~BackgroundFrees();

 private:
  BackgroundFrees();
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<void>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace loom::exec::detail
