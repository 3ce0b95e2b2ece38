#pragma once
// `qat infer --save PREFIX`: the three files of a run's inputs and logits
// (PREFIX.inputs.f32, PREFIX.logits.f32, PREFIX.paths.txt), for checking
// other runtimes against qat's. Written as temporaries and renamed into
// place only when the run has written them all, so a failed run leaves the
// earlier set whole; and an earlier set is the only thing replaced: where
// any of the three names exists, all three must (paths one line an image,
// each float file whole rows of 4-byte floats an image), else the run is
// refused before anything is written, naming the file.
#include <fstream>
#include <string>
#include <vector>

namespace qat::apps {

class InferSaveSet {
 public:
  explicit InferSaveSet(const std::string& prefix);
  ~InferSaveSet();  // unfinished: the temporaries go
  InferSaveSet(const InferSaveSet&) = delete;
  InferSaveSet& operator=(const InferSaveSet&) = delete;

  void add(const std::string& path, const float* input, int64_t input_count, const float* logits,
           int64_t logit_count);
  // The three temporaries flushed and renamed over the set (at least one
  // image added); a run that does not finish leaves the earlier set.
  void finish();

 private:
  std::string prefix_;
  std::vector<std::string> targets_, temps_;
  std::ofstream inputs_, logits_, paths_;
  int64_t images_ = 0;
  bool finished_ = false;
};

}  // namespace qat::apps
