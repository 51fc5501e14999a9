// Which modules become the units of ZeRO stage 3 / FSDP FULL_SHARD under
// each of Accelerate's auto-wrap policies (and the repeated blocks that
// DeepSpeed ZeRO-3 users get), the parsers of Accelerate's settings, and the
// tied parameters that stage 3 must keep outside the units. Small models
// built here; no collectives.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "sharding/unit_policy.h"

namespace unit_policy_test {

using accelerate::ConfigError;
using accelerate::sharding::AutoWrapPolicy;
using accelerate::sharding::find_units;
using accelerate::sharding::parse_auto_wrap_policy;
using accelerate::sharding::parse_layer_classes;
using accelerate::sharding::shared_parameter_names;
using accelerate::sharding::Unit;
using accelerate::sharding::UnitPolicy;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Four Linear layers of one type, so that a block holds more same-type
// children than a two-block model has blocks.
struct AttentionImpl : torch::nn::Module {
  AttentionImpl()
      : q(register_module("q", torch::nn::Linear(8, 8))),
        k(register_module("k", torch::nn::Linear(8, 8))),
        v(register_module("v", torch::nn::Linear(8, 8))),
        o(register_module("o", torch::nn::Linear(8, 8))) {}
  torch::nn::Linear q, k, v, o;
};
TORCH_MODULE(Attention);

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc(register_module("fc", torch::nn::Linear(8, 32))),
        proj(register_module("proj", torch::nn::Linear(32, 8))) {}
  torch::nn::Linear fc, proj;
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : ln_1(register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})))),
        attn(register_module("attn", Attention())),
        ln_2(register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})))),
        mlp(register_module("mlp", Mlp())) {}
  torch::nn::LayerNorm ln_1;
  Attention attn;
  torch::nn::LayerNorm ln_2;
  Mlp mlp;
};
TORCH_MODULE(Block);

// GPT-like: two embeddings, a ModuleList of blocks, a final LayerNorm.
struct TinyGptImpl : torch::nn::Module {
  explicit TinyGptImpl(int layers)
      : wte(register_module("wte", torch::nn::Embedding(16, 8))),
        wpe(register_module("wpe", torch::nn::Embedding(4, 8))),
        h(register_module("h", torch::nn::ModuleList())),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})))) {
    for (int i = 0; i < layers; ++i) blocks.push_back(Block());
    for (auto& block : blocks) h->push_back(block);
  }
  torch::nn::Embedding wte, wpe;
  torch::nn::ModuleList h;
  torch::nn::LayerNorm ln_f;
  std::vector<Block> blocks;
};
TORCH_MODULE(TinyGpt);

// A head that is the token embedding (GPT-2's tied lm_head).
struct TiedHeadImpl : torch::nn::Module {
  explicit TiedHeadImpl(const torch::Tensor& shared) {
    weight = register_parameter("weight", shared);
  }
  torch::Tensor weight;
};
TORCH_MODULE(TiedHead);

struct TiedLmImpl : torch::nn::Module {
  TiedLmImpl()
      : wte(register_module("wte", torch::nn::Embedding(16, 8))),
        h(register_module("h", torch::nn::ModuleList(Block(), Block()))),
        head(register_module("head", TiedHead(wte->weight))) {}
  torch::nn::Embedding wte;
  torch::nn::ModuleList h;
  TiedHead head;
};
TORCH_MODULE(TiedLm);

// A module whose own parameter alone reaches a size threshold that its
// child reaches too (PyTorch then nests the two).
struct OwnAndChildImpl : torch::nn::Module {
  OwnAndChildImpl()
      : weight(register_parameter("weight", torch::zeros({200}))),
        child(register_module("child", torch::nn::Linear(10, 10))) {}  // 110
  torch::Tensor weight;
  torch::nn::Linear child;
};
TORCH_MODULE(OwnAndChild);

struct WrapperImpl : torch::nn::Module {
  WrapperImpl()
      : bias(register_parameter("bias", torch::zeros({50}))),
        inner(register_module("inner", OwnAndChild())) {}
  torch::Tensor bias;
  OwnAndChild inner;
};
TORCH_MODULE(Wrapper);

int64_t numel(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& parameter : module.parameters()) total += parameter.numel();
  return total;
}

std::vector<std::string> paths(const std::vector<Unit>& units) {
  std::vector<std::string> out;
  for (const Unit& unit : units) out.push_back(unit.path);
  return out;
}

UnitPolicy transformer(std::vector<std::string> classes) {
  UnitPolicy policy;
  policy.policy = AutoWrapPolicy::kTransformerBased;
  policy.layer_classes = std::move(classes);
  return policy;
}

UnitPolicy size_based(int64_t min_num_params) {
  UnitPolicy policy;
  policy.policy = AutoWrapPolicy::kSizeBased;
  policy.min_num_params = min_num_params;
  return policy;
}

UnitPolicy repeated_blocks() {
  UnitPolicy policy;
  policy.policy = AutoWrapPolicy::kRepeatedBlocks;
  return policy;
}

// The message of the ConfigError that find_units throws, or "" when none.
std::string config_error(torch::nn::Module& model, const UnitPolicy& policy) {
  try {
    find_units(model, policy);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(UnitPolicyParse, AcceptsAccelerateSpellings) {
  EXPECT_EQ(parse_auto_wrap_policy("TRANSFORMER_BASED_WRAP"), AutoWrapPolicy::kTransformerBased);
  EXPECT_EQ(parse_auto_wrap_policy("SIZE_BASED_WRAP"), AutoWrapPolicy::kSizeBased);
  EXPECT_EQ(parse_auto_wrap_policy("NO_WRAP"), AutoWrapPolicy::kNoWrap);
  // Accelerate upper-cases the value before comparing.
  EXPECT_EQ(parse_auto_wrap_policy("size_based_wrap"), AutoWrapPolicy::kSizeBased);
  for (AutoWrapPolicy policy :
       {AutoWrapPolicy::kTransformerBased, AutoWrapPolicy::kSizeBased, AutoWrapPolicy::kNoWrap}) {
    EXPECT_EQ(parse_auto_wrap_policy(accelerate::sharding::to_string(policy)), policy);
  }
  EXPECT_STREQ(accelerate::sharding::to_string(AutoWrapPolicy::kRepeatedBlocks), "REPEATED_BLOCKS");
}

TEST(UnitPolicyParse, RefusesOtherValuesNamingTheKey) {
  for (const std::string value : {"TRANSFORMER_WRAP", "", " NO_WRAP", "REPEATED_BLOCKS"}) {
    try {
      parse_auto_wrap_policy(value);
      ADD_FAILURE() << "no error for '" << value << "'";
    } catch (const ConfigError& error) {
      EXPECT_EQ(std::string(error.what()),
                "fsdp_auto_wrap_policy: '" + value +
                    "' is not one of TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP");
    }
  }
}

TEST(UnitPolicyParse, LayerClassesAreTrimmedAndEmptiesDropped) {
  EXPECT_THAT(parse_layer_classes("GPT2Block"), ElementsAre("GPT2Block"));
  EXPECT_THAT(parse_layer_classes(" Block, ,Mlp ,,\tgpt::BlockImpl "),
              ElementsAre("Block", "Mlp", "gpt::BlockImpl"));
  EXPECT_THAT(parse_layer_classes(""), IsEmpty());
  EXPECT_THAT(parse_layer_classes(" , "), IsEmpty());
}

TEST(UnitPolicyDefaults, AreAccelerates) {
  UnitPolicy policy;
  EXPECT_EQ(policy.policy, AutoWrapPolicy::kNoWrap);
  EXPECT_EQ(policy.min_num_params, 100000000);
  EXPECT_THAT(policy.layer_classes, IsEmpty());
}

TEST(UnitPolicyTransformer, EveryBlockIsAUnitWhateverTheSpelling) {
  TinyGpt model(4);
  for (const std::string name : {"Block", "BlockImpl", "unit_policy_test::BlockImpl",
                                 "unit_policy_test::Block", "::unit_policy_test::BlockImpl"}) {
    SCOPED_TRACE(name);
    const std::vector<Unit> units = find_units(*model, transformer({name}));
    ASSERT_THAT(paths(units), ElementsAre("h.0", "h.1", "h.2", "h.3"));
    for (std::size_t i = 0; i < units.size(); ++i) {
      EXPECT_EQ(units[i].module, model->blocks[i].get());
      EXPECT_EQ(units[i].num_params, numel(*model->blocks[i]));
    }
  }
}

TEST(UnitPolicyTransformer, UnitsNeverNestAndLibTorchLayersMatch) {
  TinyGpt model(2);
  // Block is outermost: its Mlp is no unit of its own.
  EXPECT_THAT(paths(find_units(*model, transformer({"Mlp", "Block"}))), ElementsAre("h.0", "h.1"));
  EXPECT_THAT(paths(find_units(*model, transformer({"Mlp"}))), ElementsAre("h.0.mlp", "h.1.mlp"));
  EXPECT_THAT(paths(find_units(*model, transformer({"Embedding", "Mlp"}))),
              ElementsAre("wte", "wpe", "h.0.mlp", "h.1.mlp"));
  EXPECT_THAT(paths(find_units(*model, transformer({"torch::nn::LayerNorm"}))),
              ElementsAre("h.0.ln_1", "h.0.ln_2", "h.1.ln_1", "h.1.ln_2", "ln_f"));
  // The root is never a unit, but naming its class is no error.
  EXPECT_THAT(find_units(*model, transformer({"TinyGpt"})), IsEmpty());
}

TEST(UnitPolicyTransformer, UnknownClassNamesTheModelsClasses) {
  TinyGpt model(2);
  EXPECT_EQ(config_error(*model, transformer({"Block", "GPT2Block"})),
            "fsdp_transformer_layer_cls_to_wrap: no module of class 'GPT2Block' in the model "
            "(its classes: TinyGpt, Embedding, ModuleList, Block, LayerNorm, Attention, Linear, "
            "Mlp)");
  // A namespace that is not the class's own does not match.
  EXPECT_THAT(config_error(*model, transformer({"gpt::Block"})),
              HasSubstr("no module of class 'gpt::Block' in the model"));
  // Nor does a longer name that merely ends the same way.
  EXPECT_THAT(config_error(*model, transformer({"TinyBlock"})),
              HasSubstr("no module of class 'TinyBlock'"));
  EXPECT_THAT(config_error(*model, transformer({"lock"})), HasSubstr("class 'lock'"));
}

TEST(UnitPolicyTransformer, EmptyClassListIsRefused) {
  TinyGpt model(2);
  const std::string message = config_error(*model, transformer({}));
  EXPECT_THAT(message, HasSubstr("fsdp_transformer_layer_cls_to_wrap is empty"));
  EXPECT_THAT(message, HasSubstr("TRANSFORMER_BASED_WRAP"));
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

// Sequentials inside a module: "0" = Sequential(Linear 110, Linear 110) =
// 220, "1" = Linear 220, "2" = Sequential(Linear 20, Linear 20) = 40; 480
// in all. (A Sequential cannot hold a Sequential: its forward is a template.)
struct NestedImpl : torch::nn::Module {
  NestedImpl()
      : first(register_module(
            "0", torch::nn::Sequential(torch::nn::Linear(10, 10), torch::nn::Linear(10, 10)))),
        second(register_module("1", torch::nn::Linear(10, 20))),
        third(register_module(
            "2", torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Linear(4, 4)))) {}
  torch::nn::Sequential first;
  torch::nn::Linear second;
  torch::nn::Sequential third;
};
TORCH_MODULE(Nested);

// Holds another module as its only child, "0".
struct HolderImpl : torch::nn::Module {
  explicit HolderImpl(std::shared_ptr<torch::nn::Module> held) { register_module("0", held); }
};
TORCH_MODULE(Holder);

TEST(UnitPolicySize, FollowsPyTorchsSizeBasedRule) {
  Nested model;
  // 100: both inner Linears of "0" qualify, which leaves "0" nothing; "1"
  // qualifies at the outer level; "2" is too small as a whole.
  auto units = find_units(*model, size_based(100));
  EXPECT_THAT(paths(units), ElementsAre("0.0", "0.1", "1"));
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units[0].num_params, 110);
  EXPECT_EQ(units[2].num_params, 220);
  EXPECT_EQ(units[2].module, model->second.get());
  // 110 is reached exactly (>=).
  EXPECT_THAT(paths(find_units(*model, size_based(110))), ElementsAre("0.0", "0.1", "1"));
  // 111: the inner Linears are too small, so "0" holds 220 unwrapped ones.
  EXPECT_THAT(paths(find_units(*model, size_based(111))), ElementsAre("0", "1"));
  EXPECT_THAT(paths(find_units(*model, size_based(220))), ElementsAre("0", "1"));
  // 221: no module but the root (never a unit) is large enough.
  EXPECT_THAT(find_units(*model, size_based(221)), IsEmpty());
  // Accelerate's default threshold, and Accelerate dropping the policy at 0.
  EXPECT_THAT(find_units(*model, size_based(UnitPolicy().min_num_params)), IsEmpty());
  EXPECT_THAT(find_units(*model, size_based(0)), IsEmpty());
  EXPECT_THAT(find_units(*model, size_based(-1)), IsEmpty());
}

TEST(UnitPolicySize, NestedWrappingKeepsTheInnerUnitOnly) {
  Wrapper model;
  // PyTorch wraps inner.child (110), then inner too, whose own 200 alone
  // reach 100 (a nested FSDP unit). Units do not nest: the inner one stays,
  // inner's own weight stays outside the units.
  auto units = find_units(*model, size_based(100));
  EXPECT_THAT(paths(units), ElementsAre("inner.child"));
  EXPECT_EQ(units[0].num_params, 110);
  // At 300 the child alone is too small, inner (310) qualifies as a whole.
  EXPECT_THAT(paths(find_units(*model, size_based(300))), ElementsAre("inner"));
}

TEST(UnitPolicySize, ModuleListIsNeverAUnit) {
  TinyGpt model(4);
  const int64_t blocks = numel(*model->h);
  ASSERT_GT(blocks, 2 * numel(*model->blocks[0]));
  ASSERT_GT(blocks, numel(*model->wte));
  // Only h holds that many, and PyTorch never wraps a ModuleList.
  EXPECT_THAT(find_units(*model, size_based(blocks)), IsEmpty());
  // Each block holds enough at its own size.
  EXPECT_THAT(paths(find_units(*model, size_based(numel(*model->blocks[0])))),
              ElementsAre("h.0", "h.1", "h.2", "h.3"));
}

TEST(UnitPolicySize, MultiheadAttentionIsNotLookedInto) {
  // in_proj (216 elements) and its out_proj Linear (72): PyTorch neither
  // wraps a MultiheadAttention nor looks inside it.
  Holder model(torch::nn::MultiheadAttention(8, 2).ptr());
  ASSERT_EQ(numel(*model), 288);
  EXPECT_THAT(find_units(*model, size_based(50)), IsEmpty());
  // A Linear of the same size beside it would be a unit.
  model->register_module("1", torch::nn::Linear(8, 8));
  EXPECT_THAT(paths(find_units(*model, size_based(50))), ElementsAre("1"));
}

TEST(UnitPolicySize, TiedParametersCountOnce) {
  TiedLm model;
  const int64_t embedding = numel(*model->wte);  // 128, also the head's weight
  const int64_t body = numel(*model->h);
  // The root holds embedding + body distinct elements: a threshold one above
  // that must give no unit even though parameters() lists the head again.
  ASSERT_EQ(numel(*model), 2 * embedding + body);
  // Held by another module, the tied model is a candidate.
  Holder outer(model.ptr());
  EXPECT_THAT(paths(find_units(*outer, size_based(embedding + body))), ElementsAre("0"));
  EXPECT_EQ(find_units(*outer, size_based(embedding + body))[0].num_params, embedding + body);
  EXPECT_THAT(find_units(*outer, size_based(embedding + body + 1)), IsEmpty());
}

TEST(UnitPolicyNoWrap, HasNoUnits) {
  TinyGpt model(4);
  EXPECT_THAT(find_units(*model, UnitPolicy()), IsEmpty());
  // layer_classes and min_num_params do not matter then.
  UnitPolicy policy = transformer({"Block"});
  policy.policy = AutoWrapPolicy::kNoWrap;
  policy.min_num_params = 1;
  EXPECT_THAT(find_units(*model, policy), IsEmpty());
}

TEST(UnitPolicyRepeatedBlocks, TheBlocksOfATransformer) {
  TinyGpt model(4);
  auto units = find_units(*model, repeated_blocks());
  ASSERT_THAT(paths(units), ElementsAre("h.0", "h.1", "h.2", "h.3"));
  EXPECT_EQ(units[3].module, model->blocks[3].get());
  EXPECT_EQ(units[3].num_params, numel(*model->blocks[3]));
}

TEST(UnitPolicyRepeatedBlocks, OwnClassesBeatLibTorchLayers) {
  // Two blocks against two embeddings beside them and four Linear layers
  // inside each block's attention.
  TinyGpt model(2);
  EXPECT_THAT(paths(find_units(*model, repeated_blocks())), ElementsAre("h.0", "h.1"));
}

// Linear "0", a Sequential "1" of three Linears, Linear "2".
struct TripleImpl : torch::nn::Module {
  TripleImpl() {
    register_module("0", torch::nn::Linear(4, 4));
    register_module("1", torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Linear(4, 4),
                                               torch::nn::Linear(4, 4)));
    register_module("2", torch::nn::Linear(4, 4));
  }
};
TORCH_MODULE(Triple);

TEST(UnitPolicyRepeatedBlocks, LibTorchLayersWhenNothingElseRepeats) {
  // ReLU holds no parameters: never a unit.
  torch::nn::Sequential mlp(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 8),
                            torch::nn::ReLU(), torch::nn::Linear(8, 1));
  EXPECT_THAT(paths(find_units(*mlp, repeated_blocks())), ElementsAre("0", "2", "4"));
  // The larger group wins: three Linears inside "1" against two at the top.
  Triple triple;
  EXPECT_THAT(paths(find_units(*triple, repeated_blocks())), ElementsAre("1.0", "1.1", "1.2"));
}

TEST(UnitPolicyRepeatedBlocks, NothingRepeatsNoUnits) {
  torch::nn::Sequential model(torch::nn::Linear(4, 4),
                              torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})),
                              torch::nn::ReLU(), torch::nn::ReLU());
  EXPECT_THAT(find_units(*model, repeated_blocks()), IsEmpty());
}

TEST(UnitPolicyShared, TiedWeightsAcrossUnitsAndTheRestAreReported) {
  TiedLm model;
  // Blocks share nothing.
  EXPECT_THAT(shared_parameter_names(*model, find_units(*model, transformer({"Block"}))),
              IsEmpty());
  EXPECT_THAT(shared_parameter_names(*model, {}), IsEmpty());
  // The embedding a unit, its tied head outside all units.
  auto units = find_units(*model, transformer({"Embedding"}));
  ASSERT_THAT(paths(units), ElementsAre("wte"));
  EXPECT_THAT(shared_parameter_names(*model, units), ElementsAre("wte.weight", "head.weight"));
  // Both in units of their own.
  units = find_units(*model, transformer({"Embedding", "TiedHead"}));
  ASSERT_THAT(paths(units), ElementsAre("wte", "head"));
  EXPECT_THAT(shared_parameter_names(*model, units), ElementsAre("wte.weight", "head.weight"));
}

TEST(UnitPolicyShared, OneUnitHoldingBothNamesSharesNothing) {
  // With the tied model as the one unit, both names of the tied weight are
  // in that unit.
  TiedLm model;
  Holder outer(model.ptr());
  UnitPolicy policy = transformer({"TiedLm"});
  auto units = find_units(*outer, policy);
  ASSERT_THAT(paths(units), ElementsAre("0"));
  EXPECT_EQ(units[0].num_params, numel(*model) - numel(*model->wte));
  EXPECT_THAT(shared_parameter_names(*outer, units), IsEmpty());
}

// Parameters that are views into one flat buffer, as after ZeRO's
// rebinding: "a" and "b" view the same elements, "c" the others.
struct ViewsImpl : torch::nn::Module {
  ViewsImpl() {
    const torch::Tensor flat = torch::zeros({20});
    register_module("a", TiedHead(flat.narrow(0, 0, 10)));
    register_module("b", TiedHead(flat.narrow(0, 0, 10)));
    register_module("c", TiedHead(flat.narrow(0, 10, 10)));
  }
};
TORCH_MODULE(Views);

TEST(UnitPolicyShared, ViewsOfTheSameMemoryAreOneParameter) {
  Views model;
  const auto units = find_units(*model, transformer({"TiedHead"}));
  ASSERT_THAT(paths(units), ElementsAre("a", "b", "c"));
  EXPECT_THAT(shared_parameter_names(*model, units), ElementsAre("a.weight", "b.weight"));
  // Counted once: 20 distinct elements, which a threshold of 21 does not reach.
  Holder outer(model.ptr());
  EXPECT_THAT(paths(find_units(*outer, size_based(20))), ElementsAre("0"));
  EXPECT_THAT(find_units(*outer, size_based(21)), IsEmpty());
}

TEST(UnitPolicyShared, ABlockTiedToAnotherBlock) {
  TinyGpt model(3);
  // Block 2's Mlp takes block 0's first projection as an extra parameter.
  model->blocks[2]->mlp->register_parameter("borrowed", model->blocks[0]->mlp->fc->weight);
  auto units = find_units(*model, repeated_blocks());
  ASSERT_THAT(paths(units), ElementsAre("h.0", "h.1", "h.2"));
  // Block 2 holds its own parameters and the borrowed 8x32 elements.
  EXPECT_EQ(units[2].num_params, numel(*model->blocks[1]) + 8 * 32);
  EXPECT_THAT(shared_parameter_names(*model, units),
              ElementsAre("h.0.mlp.fc.weight", "h.2.mlp.borrowed"));
}

}  // namespace unit_policy_test
