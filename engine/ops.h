// engine/ops.h: every differentiable op of the engine, one include for all of them.
//
// Each family has its header (declarations with the formula) and one .cpp in engine/ops/ where
// each op's forward and backward sit side by side. The numeric inner loops are device kernels:
// engine/cpu/<family>.cpp (and engine/cuda/<family>.cu with issue 3), called from the op through
// a switch on the tensor's device.
#pragma once
#include "engine/autograd.h"
#include "engine/tensor.h"
#include "engine/ops/elementwise.h"  // add sub mul div (broadcasting), scalar forms, unary math, activations,
                                     // bias_gelu, bias_silu, masked_relu2
#include "engine/ops/reduce.h"       // sum mean max over dims, sum_to
#include "engine/ops/matmul.h"       // matmul, batched matmul with transposes, linear,
                                     // gelu_linear, layer_norm_linear
#include "engine/ops/shape.h"        // transpose permute concat slice split index_select gather embedding masks
#include "engine/ops/nn.h"           // softmax log_softmax layer_norm add_layer_norm dropout cross_entropy mse
                                     // attention rope
#include "engine/ops/conv.h"         // conv2d depthwise_conv2d batch_norm
#include "engine/ops/rnn.h"          // lstm_cell lstm_sequence
