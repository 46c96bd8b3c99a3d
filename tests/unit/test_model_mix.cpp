#include <catch2/catch.hpp>
#include <cstddef>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "model_mix.hpp"  // benchmarks/: bps-bench --model's gradient mixes

// The generators walk the architectures; these cases pin the result to the published counts
// (torchvision's num_params) and to shapes read off the papers' layer tables.

// A named namespace, not an anonymous one: the sanitizer builds compile test files in unity
// batches, where helpers of the same name in two files would collide.
namespace model_mix_test {

using shape = std::vector<std::size_t>;

const bench::model::param_tensor& tensor(const bench::model::mix& m, const std::string& name) {
  for (const auto& t : m.tensors)
    if (t.name == name) return t;
  FAIL("no tensor named " << name << " in " << m.name);
  throw std::logic_error("unreachable");
}

std::size_t distinct_names(const bench::model::mix& m) {
  std::set<std::string> names;
  for (const auto& t : m.tensors) names.insert(t.name);
  return names.size();
}

TEST_CASE("model mix: resnet50 has 161 parameter tensors and 25557032 parameters") {
  const auto m = bench::model::resnet50();
  CHECK(m.name == "resnet50");
  CHECK(m.tensors.size() == 161);
  CHECK(m.parameters() == 25'557'032);
  CHECK(distinct_names(m) == 161);
  CHECK_NOTHROW(bench::model::check_published_counts(m));

  // Forward order: the stem first, the classifier last.
  CHECK(m.tensors.front().name == "conv1.weight");
  CHECK(m.tensors.front().shape == shape{64, 3, 7, 7});
  CHECK(m.tensors[1].name == "bn1.weight");
  CHECK(m.tensors[2].name == "bn1.bias");
  CHECK(m.tensors[3].name == "layer1.0.conv1.weight");
  CHECK(m.tensors[m.tensors.size() - 2].name == "fc.weight");
  CHECK(m.tensors.back().name == "fc.bias");

  CHECK(tensor(m, "fc.weight").shape == shape{1000, 2048});
  CHECK(tensor(m, "fc.bias").shape == shape{1000});
  CHECK(tensor(m, "layer1.0.downsample.0.weight").shape == shape{256, 64, 1, 1});
  CHECK(tensor(m, "layer2.0.conv1.weight").shape == shape{128, 256, 1, 1});
  CHECK(tensor(m, "layer2.0.downsample.0.weight").shape == shape{512, 256, 1, 1});
  CHECK(tensor(m, "layer3.5.conv2.weight").shape == shape{256, 256, 3, 3});
  CHECK(tensor(m, "layer4.0.downsample.1.bias").shape == shape{2048});
  CHECK(tensor(m, "layer4.2.conv3.weight").shape == shape{2048, 512, 1, 1});
  CHECK(tensor(m, "layer4.2.bn3.weight").elements() == 2048);

  // A projection only in the first block of each stage; [3, 4, 6, 3] blocks.
  int projections = 0;
  std::set<std::string> blocks;
  for (const auto& t : m.tensors) {
    if (t.name.find(".downsample.0.weight") != std::string::npos) ++projections;
    if (t.name.starts_with("layer"))  // "layerS.B.conv1.weight" -> "layerS.B"
      blocks.insert(t.name.substr(0, t.name.find('.', t.name.find('.') + 1)));
  }
  CHECK(projections == 4);
  CHECK(blocks.size() == 16);
  CHECK(blocks.contains("layer3.5"));
  CHECK_FALSE(blocks.contains("layer3.6"));
  CHECK_FALSE(blocks.contains("layer4.3"));
}

TEST_CASE("model mix: vgg16 has 32 parameter tensors and 138357544 parameters") {
  const auto m = bench::model::vgg16();
  CHECK(m.name == "vgg16");
  CHECK(m.tensors.size() == 32);
  CHECK(m.parameters() == 138'357'544);
  CHECK(distinct_names(m) == 32);
  CHECK_NOTHROW(bench::model::check_published_counts(m));

  CHECK(m.tensors.front().name == "features.0.weight");
  CHECK(m.tensors.front().shape == shape{64, 3, 3, 3});
  CHECK(m.tensors[1].name == "features.0.bias");
  CHECK(m.tensors[1].shape == shape{64});
  // torchvision's module indices: a pool after convolutions 2, 4, 7, 10 and 13.
  CHECK(tensor(m, "features.5.weight").shape == shape{128, 64, 3, 3});
  CHECK(tensor(m, "features.10.weight").shape == shape{256, 128, 3, 3});
  CHECK(tensor(m, "features.28.weight").shape == shape{512, 512, 3, 3});
  CHECK(tensor(m, "features.28.bias").shape == shape{512});
  CHECK(tensor(m, "classifier.0.weight").shape == shape{4096, 25088});
  CHECK(tensor(m, "classifier.3.weight").shape == shape{4096, 4096});
  CHECK(tensor(m, "classifier.6.weight").shape == shape{1000, 4096});
  CHECK(m.tensors.back().name == "classifier.6.bias");
  CHECK(m.tensors.back().shape == shape{1000});
  // The first fc layer alone holds 74% of the parameters.
  CHECK(tensor(m, "classifier.0.weight").elements() == 102'760'448);
}

TEST_CASE("model mix: by_name knows resnet50 and vgg16 only") {
  CHECK(bench::model::by_name("resnet50")->tensors.size() == 161);
  CHECK(bench::model::by_name("vgg16")->tensors.size() == 32);
  CHECK_FALSE(bench::model::by_name("resnet").has_value());
  CHECK_FALSE(bench::model::by_name("").has_value());
  CHECK(bench::model::known_names == "resnet50, vgg16");
}

TEST_CASE("model mix: a generator that loses a tensor fails the published-count check") {
  auto m = bench::model::resnet50();
  m.tensors.pop_back();  // fc.bias
  CHECK_THROWS_WITH(bench::model::check_published_counts(m),
                    "resnet50: the generator gives 160 tensors and 25556032 parameters; the "
                    "architecture has 161 and 25557032");
  bench::model::mix unknown{"alexnet", {}};
  CHECK_THROWS_AS(bench::model::check_published_counts(unknown), std::logic_error);
}

}  // namespace model_mix_test
