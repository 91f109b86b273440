// init/standard.h: the classic initialization families, and the small helpers every scheme uses
// to write parameters in place.
//
// Fans follow torch.nn.init (_calculate_fan_in_and_fan_out): for a weight [out, in, k...] the
// fan_in is in·Πk and the fan_out out·Πk, computed from the tensor's shape alone. So an Embedding
// table [V, D] has fan_in D, an LSTM weight_ih [4H, in] has fan_in `in`, a depthwise filter
// [C, 1, k, k] has fan_in k².
//
//   torch          PyTorch's defaults, as the layers construct themselves: Linear and Conv weight
//                  kaiming-uniform(a=√5) = U(±1/√fan_in), bias U(±1/√fan_in); Embedding N(0, 1);
//                  LSTM every tensor U(±1/√H); LayerNorm/BatchNorm 1/0; class token 0; learned
//                  position embedding trunc-normal(0, 0.02) on ±2 (what the models construct).
//   timm           trunc-normal(0, 0.02), truncated at ±2 absolute (timm's trunc_normal_), on
//                  every Linear weight, their biases 0; norms 1/0; class token and learned
//                  position embedding trunc-normal(0, 0.02) (DeiT / timm ≤ 0.4; newer timm draws
//                  the class token with std 1e-6). As timm's init_weights_vit_timm, it visits
//                  Linear layers only: the ViT's patch conv (and any Conv, Embedding or LSTM)
//                  keeps the values the model was built with, PyTorch's defaults. (Until
//                  2026-11-28 the patch conv got the trunc-normal too: 4–8× weaker image
//                  patches against the PE; docs/RESULTS.md section 1 says what it cost.)
//   xavier         Glorot & Bengio 2010: U(±gain·√(6/(fan_in+fan_out))); xavier-normal:
//                  N(0, gain²·2/(fan_in+fan_out)).
//   kaiming        He et al. 2015, fan_in mode, ReLU gain √2: N(0, 2/fan_in); kaiming-uniform:
//                  U(±√(6/fan_in)); kaiming-fan-out: N(0, 2/fan_out) (the mode that keeps the
//                  backward's variance). --gain multiplies the std on top of √2 (default 1).
//   lecun          LeCun 1998: N(0, 1/fan_in) (× gain).
//   normal:STD     N(0, STD²) (plain "normal": Options::normal_std, 0.02).
//   uniform:A      U(±A) on every weight AND bias (Zaremba et al. 2014: Torch7's params:uniform(−A, A),
//                  0.1 small / 0.05 medium / 0.04 large; plain "uniform": 0.1).
//   orthogonal     Saxe et al. 2014, as torch.nn.init.orthogonal_: the weight viewed as
//                  [out, fan_in] is the Q factor of a Gaussian matrix with the signs of diag(R)
//                  fixed, times gain: WᵀW = gain²·I when tall (out ≥ fan_in), WWᵀ = gain²·I when
//                  wide.
// The classic families (xavier … orthogonal) rewrite every weight of Linear, Conv2d,
// DepthwiseConv2d, Embedding and LSTM layers, zero every bias, reset LayerNorm/BatchNorm (and
// GAU's γ/β) to 1/0, and leave class tokens, learned position embeddings and LayerScale as they are.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "engine/tensor.h"
#include "init/init.h"

namespace init {

// ---------------------------------------------------------------------------------------------
// Schemes (SchemeFn signature).

void torch_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void timm_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void xavier_uniform_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void xavier_normal_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void kaiming_normal_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void kaiming_uniform_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void kaiming_fan_out_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void lecun_normal_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void normal_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);  // opt.normal_std
void uniform_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);  // opt.uniform_bound
void orthogonal_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);

// ---------------------------------------------------------------------------------------------
// Building blocks for other schemes.

// A [rows, cols] matrix with orthonormal columns (rows ≥ cols) or rows (rows < cols), times gain:
// the Q of the QR of a N(0,1) matrix, column signs fixed by diag(R) ≥ 0 (engine::qr), so it is
// Haar-distributed. Draws rows·cols normals from the global generator.
engine::Tensor orthogonal_matrix(int64_t rows, int64_t cols, float gain);

struct Fans {
    int64_t in, out;
};
Fans fans_of(const engine::Tensor& weight);  // torch's rule, for 2-d and higher

// A weight-bearing layer's weight and (possibly undefined) bias, by dotted parameter name.
// LSTM layers contribute two entries (weight_ih with bias_ih, weight_hh with bias_hh).
struct WeightRef {
    std::string name;     // "blocks.0.attn.q.weight"
    engine::Tensor* weight;
    engine::Tensor* bias;  // null or undefined when the layer has none
    std::string kind;     // Linear | Conv2d | DepthwiseConv2d | Embedding | LSTM
};
std::vector<WeightRef> weight_layers(nn::Module& model);

// In-place writes into a parameter's storage (grad mode off inside; CPU tensors only). `what`
// names the tensor in error messages. They never replace the Tensor object.
void fill_uniform(engine::Tensor& t, float low, float high);
void fill_normal(engine::Tensor& t, float mean, float std);
void fill_trunc_normal(engine::Tensor& t, float mean, float std, float a, float b);
void fill_value(engine::Tensor& t, float value);
void copy_into(engine::Tensor& dst, const engine::Tensor& src, const std::string& what);
void scale_inplace(engine::Tensor& t, float factor);

// LayerNorm and BatchNorm weight 1, bias 0 (BatchNorm's running statistics 0/1); GAU γ 1, β 0.
// Returns how many norm layers it reset.
int reset_norms(nn::Module& model);

}  // namespace init
