// oneDNN Conv, ConvTranspose and dynvm::FusedConv (f32, forward inference), 1-3 spatial dims.
//
// Layouts: the primitive is created with format_tag::any for source, weights and destination,
// so oneDNN picks its fastest (blocked, nChw16c-like) layouts; the site reorders the plain
// NCHW input into that layout and the result back into the plain output, in the site's
// workspace. Where oneDNN picks the plain layout, there is no reorder. Weights reordered for a
// FusedConv whose weights are a constant of the executable ("constant_weights" = 1, set by the
// compiler's conv fusion pass) are packed once per kernel and shared by every VM and site that
// runs the kernel; other weights are reordered on every run.
//
// FusedConv (dynvm domain, made by compiler/conv_fusion.cc): Conv's inputs and attributes plus
// an optional fourth input `sum` added to the result (oneDNN's sum post-op: a residual Add) and
// an "activation" applied last (an eltwise post-op): Relu, LeakyRelu (alpha), Clip (alpha =
// min, beta = max), Sigmoid, HardSwish, SiLU, Tanh, Affine (alpha * x + beta), then optionally
// an "activation2" (same names, a second eltwise post-op: the Mul/Add by a scalar or the
// Max/Min with one that exports write after an activation). A NaN the convolution produces passes
// through Relu and Clip as 0 / the bound on this backend (oneDNN's max and min drop NaN), as
// in other runtimes' fused kernels; the reference kernel keeps it.
//
// A FusedConv with a depthwise stage (inputs 4 and 5: a 1x1 conv, then a 3x3 depthwise conv;
// compiler/conv_fusion.h) runs as one convolution with oneDNN's depthwise post-op or as two
// primitives (BindPair).
//
// Three shape classes run dynvm's own code instead of a oneDNN convolution: small images as one
// GEMM (UseGemm), dense 3x3 stride-1 convs as dynvm's Winograd F(2x2, 3x3) where oneDNN has
// no Winograd (OwnWinogradTakes and choice::UseOwnWinograd, kernels/cpu/winograd.h), and a
// ConvTranspose whose kernel equals its stride (no overlapping windows) as one GEMM per image
// and a scatter (DeconvAsGemm).
//
// Each site keeps its primitives per concrete shape in a bounded LRU (conv.h). Shapes oneDNN
// has no primitive for, strided weights or bias, empty tensors and non-f32 data run the
// reference kernel, which also reports every shape error (a channel mismatch, a negative pad,
// a kernel larger than the padded input) as InvalidArgument.
//
// Tuning notes (moved here from docs/kernels.md with the code's move to kernels/cpu/; the
// figures are those of the records named):
//
// Conv family (kernels/dnnl/conv.cc, pool.cc; forward inference, f32, 1 to 3 spatial dims):
// - *Kernels.* Conv with groups (depthwise included), dilations, strides, asymmetric pads and
//   auto_pad; ConvTranspose with output_padding, output_shape, groups and dilations (the
//   deconvolution primitive; ONNX's [C, M/group, K...] weights are read through strides); MaxPool
//   and AveragePool (count_include_pad, ceil_mode, dilations, auto_pad), GlobalMaxPool,
//   GlobalAveragePool; BatchNormalization with global statistics (inference mode); LRN (odd sizes:
//   oneDNN centres an even window differently from ONNX). Shape errors (W's channels against X's, a
//   negative pad, a kernel larger than the padded input) are the reference kernel's
//   InvalidArgument, and the compiler reports them at compile time when the dims are known
//   (InferConvShape, compiler/conv_fusion.h), naming the node.
// - *Fallbacks* to the reference kernel (counted): empty tensors, more than 3 spatial dims, strided
//   bias, a max pool over an input holding NaN, an average pool with count_include_pad whose
//   ceil_mode window runs past the end padding (ONNX does not count that part; oneDNN would),
//   MaxPool's Indices output and training-mode BatchNormalization (at create), a channels-last
//   operand that is not a dense buffer (the reference kernel rejects it: InvalidArgument), and
//   shapes oneDNN has no primitive for. constant_weights is the compiler's promise that W is an
//   executable constant (packed once per address and layout).
// - *Layouts.* A conv primitive's plain operands are given to oneDNN as format_tag::any, so it
//   picks its fastest layout (channels-last on AVX-512), and the site reorders the plain input into
//   it and the result back, in its workspace. Between FusedConvs there are no reorders: the conv
//   fusion pass marks a value passed only from one FusedConv to others (as X or the residual)
//   channels-last (channels_last_out on the producer, channels_last_in / channels_last_sum on the
//   readers), the value keeps its logical dims and byte size, and the kernels create their
//   primitives on NHWC there (the reference FusedConv converts). So a chain of convs reorders only
//   where it meets another op (the classifier, a graph output). Pools (MaxPool, AveragePool, the
//   global pools, without Indices) pass the layout through (channels_last_in / channels_last_out:
//   the oneDNN pooling primitive runs on NHWC; the reference pool reads a channels-last input as a
//   strided view and converts its output). A pool whose output goes to another op (a CRNN's
//   Squeeze/Transpose into its LSTM) still takes its input channels-last and gives its output
//   plain: it pools into channels-last in its workspace and reorders the (smaller) result, as
//   oneDNN pools plain or mixed layouts with a slow generic kernel (simple_nchw), and the conv
//   before it writes channels-last (ConvFusion.ChannelsLastIntoAPoolWithAPlainOutput). A max pool
//   over a channels-last input whose windows lie inside it (no padding; at most 64 elements per
//   window; any stride or dilation), written channels-last or to one pixel, runs dynvm's own loop
//   (ChannelsLastMaxPool: one vectorized pass over the output pixels' channel vectors), which
//   propagates NaN like the reference kernel and so skips the NaN scan oneDNN's max pooling needs;
//   on the CRNN's pools (AVX2) it takes about a third of the time of oneDNN's pooling plus the scan
//   (DnnlPool.ChannelsLastMaxPoolMatchesReference). Weights of a FusedConv marked constant_weights
//   (every Conv with constant weights after the fusion) are reordered once per kernel, into a
//   buffer the kernel owns and every VM and site running it shares (at the first run, not at
//   compile time); other weights are reordered per run. vm-compile --report shows what the fusion
//   did (conv_fusion convs, pads, batch_norms, scales, transposes, sums, activations,
//   channels_last_values) and each conv-family kernel's layouts (kernel 2: dynvm::FusedConv f32
//   -> fusedconv.f32.dnnl.any; layout X channels-last, Y plain): a plain X or Y of a conv is where
//   a reorder may run (when oneDNN's chosen layout differs from plain, known only at bind time);
//   channels-last operands are passed as they are.
// - *No reference implementations.* oneDNN serves some layout pairs only with its reference
//   convolution (ref:any, 10-100x slower): on AVX2 (no AVX-512), a one-channel plain input with a
//   channels-last output (a CRNN's first conv) and a channels-last input with a plain output. A
//   site therefore tries the tensors' own layouts, then the destination in the source's layout,
//   then (a plain input of more than one channel with a channels-last output at least as big: a
//   CNN's first conv on an RGB image) the input reordered into channels-last, then oneDNN's choice
//   for both, and binds the first pair with an optimized implementation, reordering as for any
//   choice; the reference implementation is kept only when every pair gets it (counted in
//   ConvCacheStats::reference_impls; DnnlFusedConv.ChannelsLastPortsAvoidOneDnnReferenceImpls,
//   which also asserts that such a first conv reorders its input and not its output,
//   ConvCacheStats::src_reorders / dst_reorders). On AVX2 oneDNN's choice for that first conv is a
//   plain source with a blocked (nChw8c) destination reordered into NHWC after, so the bigger
//   tensor (32 or 64 channels at half the size against 3) was the one reordered; reordering the
//   input and running its NHWC -> NHWC kernel is 1.05x-1.46x faster for mobilenet_v2's and
//   resnet18's first convs at batch 1 and 8, 64x64 and 224x224 (tools/bench/conv-micro,
//   pw-conv-micro-2026-11-28.txt; e.g. batch 8, 224x224, 3x3 to 32 channels: 3.99 ms -> 2.74 ms,
//   7x7 to 64: 23.6 ms -> 20.5 ms), about 1% of those models end to end (within the shared
//   machine's noise: pw-cnn-ab-2026-11-28.txt). On the AVX2 machine this took the CRNN from 233-586
//   ms to 1.7-12 ms per line (crnn-before-2026-11-28.txt, crnn-after-2026-11-28.txt).
// - *Winograd.* A FusedConv with constant weights that is 2D, 3x3, stride 1, undilated and
//   ungrouped, with at least 32 input and 16 output channels (32 before DBNet's 96 -> 24 head
//   convs measured 2.3x faster on it) and at least 96 output pixels per
//   image (10x10, or 4x24 in a text line), asks oneDNN for its Winograd algorithm (jit_wino_4x3 /
//   jit_fp32_wino_2x3 on AVX-512: 2.25-4x fewer multiply-adds) with source and destination in its
//   own blocked layout, reordered from and to the tensors' layouts like any other layout choice,
//   and its transformed weights packed once like other constant weights. Where oneDNN has none (no
//   AVX-512, or post-ops its Winograd does not take, such as Clip), dynvm's own Winograd runs for
//   the shapes of the next bullet, and the direct algorithm for the others.
// - *dynvm's own Winograd F(2x2, 3x3)* (kernels/cpu/winograd.{h,cc}, AVX2 + FMA). A FusedConv with
//   constant weights between channels-last values (input and output, and the residual when it has
//   one), 2D, 3x3, stride 1, undilated, ungrouped, with at least 32 input and 32 output channels
//   and at least 16 output tiles (2x2 pixels) over the batch (before the small-image GEMM, where
//   both take a shape), on a CPU with AVX2 and FMA, for which oneDNN creates no Winograd primitive
//   (decided when the site binds the shape: every CPU without AVX-512) runs dynvm's Winograd: any
//   pads (the zeros are made in the input transform), any height and width (partial tiles at the
//   bottom and right), any batch, every post-op (bias, the residual sum, each activation) applied
//   in the output transform before the NHWC store. The weights are transformed once (U = G g G^T,
//   16 matrices [C, M] packed in 16-column panels, 16/9 of the weights' size) and kept like the
//   other packed weights (one copy per kernel, shared by every VM and site). Per block of output
//   tiles (1 MiB of transformed input at most, 24 to 120 tiles): the input transform B^T d B
//   vectorized over channels (NHWC keeps them contiguous), 16 products (tiles x C) by (C x M) in an
//   AVX2 6x16 micro-kernel with its weights panel in L1, and the output transform A^T m A
//   vectorized over output channels. With more than one thread the blocks are split over the VM's
//   pool (one block per thread at least, each task its own part of the site's workspace); below
//   kMinParallelWork it runs on one thread. 2.25x fewer multiply-adds than the direct convolution:
//   by the timing aid in winograd_test.cc (DISABLED_Timing, 1 thread, weights hot) the CRNN's convs
//   2-4 run 1.35-1.75x faster than oneDNN's jit:avx2 direct kernels (which run at 80-95% of the FMA
//   peak here), resnet18's 56x56-8x8 stages 1.5-3x; with 512 channels it is bound by reading its 16
//   MiB of transformed weights (7x7 at batch 1 even, at batch 8 1.5-2x faster), and with fewer than
//   16 tiles (a 4x4 image at batch 1) it gains nothing end to end (resnet18 batch 1 at 64x64 with
//   the threshold at 4 tiles: the same time). Rounding: the transforms scale values (|V| up to 4x
//   the input, |U| up to 2.25x the weights), so results differ from the reference kernel by a few
//   times a direct convolution's rounding error; winograd_test.cc asserts |y - ref| <= 2e-5 sqrt(C)
//   (1 + |ref| / sqrt(9C)) for inputs and weights in [-1, 1] (largest error seen 4e-5 at 256
//   channels), over random channel counts, odd sizes, pads 0, 1 and asymmetric, batches, every
//   activation and the residual, at 1 and 2 threads, and that stride 2, dilation, groups, 1x1 and
//   5x5 kernels, 16 channels, few tiles and plain layouts do not bind it, and that weights past the
//   kernel's 64 packed copies are transformed per run, correctly. DYNVM_DNNL_OWN_WINOGRAD=0 turns
//   it off (for A/B measurements). End to end, 1 thread, side by side with ONNX Runtime on the
//   shared AVX2 machine (wino-crnn-t1-2026-11-28.txt, wino-cnn-t1-2026-11-28.txt): CRNN 1.31x-1.54x
//   ORT (widths 100-400; 0.93x-1.19x before), resnet18 1.14x / 1.33x (batch 1 / 8, 64x64) and 1.26x
//   / 1.10x (224x224; 0.91x / 0.67x before); mobilenet_v2 has no such convolution (its 3x3 ones are
//   depthwise or strided) and binds the same primitives as before. Below the thresholds (small
//   images, few channels) it loses: by per-primitive timings (ONEDNN_VERBOSE=1, on the shared
//   machine), resnet18's 8x8 and smaller stages gain nothing once the reorders are paid (its 16x16
//   stage at 64x64 input breaks even), while its 56x56-14x14 stages at 224x224 and the CRNN's 32-
//   to 128-channel convs (down to 4x25 pixels at width 100) run 1.3x to 2.5x faster, reorders
//   included. DnnlFusedConv.WinogradWhereItPays MatchesReference checks results against the
//   reference kernel (every post-op variant, channels-last ports, widths and batches) and which
//   algorithm each shape bound.
// - *Small images as one GEMM.* A FusedConv with constant weights between channels-last values
//   (channels_last_in and _out, and _sum when it has a residual), 2D, ungrouped, with an activation
//   that is none, Relu, LeakyRelu or Clip, whose output has at most 16 pixels per image (a CNN's
//   last stages: 4x4, 2x2) and at least 32 over the batch (and an im2col matrix of at most 32 MiB),
//   runs as im2col of the NHWC input (zeros in the padding, any stride, dilation or kernel) and one
//   dnnl_sgemm over the whole batch (rows: output pixels, columns: output channels, inner: KH*KW*C)
//   straight into the NHWC output, with the residual as C's initial value and bias and activation
//   in one pass after it; the weights are packed once into [KH, KW, C, M] (a oneDNN reorder, kept
//   like other packed weights). oneDNN's direct convolution runs such shapes far below peak (4 to
//   16 pixels per image); with fewer than 32 rows sgemm's per-call packing of the weights costs
//   more than it saves (resnet18 batch 1 at 64x64: 1.4x slower that way), so those stay on oneDNN.
//   Where dynvm's own Winograd (above) takes a shape too (3x3, stride 1, at least 32 channels and
//   16 tiles: resnet18's 4x4 stage at batch 8) it runs instead: 2.8-4x faster than the GEMM by the
//   timing aid, about 5% of resnet18 b8 64's CPU time end to end. resnet18 at batch 8, 64x64: about
//   1.4x faster in all (A/B against the previous build, interleaved, on the shared machine).
//   DnnlFusedConv.SmallImagesAsOneGemmMatchReference checks results against the reference kernel
//   (bias, residual, each activation, strides, dilations, asymmetric pads and kernels) and which
//   shapes take the GEMM.
// - *1x1 convolutions stay on oneDNN* (measured on the AVX2 EPYC, tools/bench/conv-micro,
//   pw-conv-micro-2026-11-28.txt). A 1x1 stride-1 unpadded FusedConv between channels-last values
//   is the GEMM Y[P, M] = X[P, C] W^T over the pixels, read in place; run as dnnl_sgemm over blocks
//   of 64, 256 or 1024 pixels (or all at once) with bias, activation and residual applied per
//   block, it is 1.09x-8.7x slower than oneDNN's jit_1x1 on every 1x1 shape of mobilenet_v2 at
//   batch 1 and 8 (224x224): jit_1x1 runs the compute-bound shapes at 83-96 GFLOP/s (the 7x7 320 ->
//   1280 conv at 90), sgemm at 9-83. In scratch builds (prototypes not kept, timings not recorded),
//   dynvm's own AVX2 micro-kernels (Winograd's 6x16 one over packed 16-channel panels, and one
//   keeping every output channel of up to 32 in registers for the projection convs) matched or lost
//   to it too, as did a channels-last depthwise kernel against jit_dw (0.5x-1x its speed). What
//   stays slow is memory traffic: at batch 8, 224x224, the 112x112 and 56x56 stages' activations
//   (6-39 MB each) do not fit the caches, and the same 1x1 shapes run at 39-64 GFLOP/s there
//   against 85-86 at batch 1 (16 -> 96 at 112x112, 144 -> 24 with its residual at 56x56);
//   mobilenet_v2 runs 8.7 ms per image at batch 1 and 10.7 ms per image at batch 8
//   (pw-cnn-t1-2026-11-28.txt). Fusing a 1x1 expansion with the depthwise conv after it keeps those
//   activations in cache: see the next item.
// - *1x1 expansion + 3x3 depthwise pairs* (an inverted residual block's first two convs). The conv
//   fusion pass folds a FusedConv that is 1x1, stride 1, unpadded, undilated, ungrouped, with no
//   residual, whose output is read only by a FusedConv that is a 3x3 depthwise conv (group == its
//   channels, stride 1 or 2, pad 1 all round, undilated, no residual) into one FusedConv with the
//   depthwise weights and bias as inputs 4 and 5 (dw_stride, dw_activation;
//   compiler/conv_fusion.h), any activations on either. The reference kernel runs the 1x1 conv,
//   then the depthwise conv directly in double (the tests' oracle). The dnnl kernel binds, per
//   shape, one oneDNN convolution with the depthwise post-op (append_dw_k3s1p1 / append_dw_k3s2p1,
//   both weights packed once, the depthwise weights in the layout query_md(exec_arg_md,
//   DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS) gives) where input and output are channels-last,
//   the expanded tensor (over the batch) has at least 2^20 elements, 4 MiB (kFusedDwMinElements:
//   smaller ones stay in cache between two primitives), and oneDNN has an optimized implementation
//   (jit_1x1:avx2; for small images it offers ref_fused_convolution, which is not taken); otherwise
//   two primitives, the 1x1 conv writing the expanded tensor channels-last into a buffer every pair
//   on the thread shares (it stays in cache from pair to pair as the memory plan's buffers do
//   between two FusedConv nodes; a buffer per site ran batch 1's 112x112 pair 1.6x slower; it grows
//   to at most 4 MiB per thread, is not trimmed, and is outside the VM's memory accounting; a
//   bigger expanded tensor, of a pair oneDNN would not fuse, goes in the site's workspace, which is
//   accounted) and jit_dw reading it, both on channels-last tensors (a plain input or output is
//   reordered, so that AVX2 gets optimized kernels) (ConvCacheStats::dw_fused / dw_separate; for
//   A/B runs DYNVM_DNNL_FUSED_DW=0 forces two primitives and DYNVM_DNNL_FUSED_DW=N sets the
//   threshold to N elements). Two oneDNN 2.6 defects shape this: with channels-last (nhwc) source
//   and destination its fused AVX2 kernel computes wrong values (all but the first few channels of
//   each pixel; the conv-micro fused timings of pw-conv-micro-2026-11-28.txt were taken on that
//   layout and are not valid), and without a bias on the 1x1 conv it crashes. So the fused
//   primitive takes its own blocked layouts, its input and output reordered from and to
//   channels-last in the workspace, and always gets a bias (zeros when the conv has none). The
//   threshold is measured per pair (mobilenet_v2 at 224x224, 1 thread, per-node traces of the same
//   model with every pair fused, DYNVM_DNNL_FUSED_DW=1, against two primitives,
//   DYNVM_DNNL_FUSED_DW=0; tools/bench/trace_ab.py, dwfuse-pairs-final-2026-11-28.txt; earlier runs
//   before the shared buffer above: dwfuse-pairs-all-, dwfuse-pairs-b1-,
//   dwfuse-pairs-2026-11-28.txt): expanded tensors of 4.8 MB and more gain (batch 8 112x112 16 ->
//   96 stride 2 1.83x, 56x56 24 -> 144 1.10x and 1.73x, 28x28 32 -> 192 1.04x-1.24x; batch 1
//   112x112 1.20x), those of 3.6 MB and less lose (batch 8 14x14 and 7x7 pairs 0.69x-0.96x, batch 1
//   56x56 0.57x and 0.84x): the reorders weigh more than the traffic saved there. Timed alone, each
//   pair repeated on warm caches (conv-micro, dwfuse-conv-micro-2026-11-28.txt), the fused pair
//   with its reorders is 1.24x-1.81x faster at batch 8 56x56 and 112x112, 0.94x-0.99x at batch 8
//   28x28 and batch 1 112x112, 0.8x below; in the model, where the caches hold other layers' data,
//   the 4.8 MB pairs gain. DnnlFusedConv.PointwiseThenDepthwiseMatchesReference checks the kernel
//   against the reference (random batch, channels and sizes, stride 1 and 2, activation pairs, with
//   and without the 1x1's bias, channels-last or plain ends, 1 and 2 threads) and that the post-op
//   binds on AVX2 without oneDNN's reference implementation; ConvFusion.ExpansionAndDepthwise
//   FoldIntoOneFusedConv and ConvFusion.NearMissesOfTheDepthwisePairAreNotFolded check the fold
//   (fires on the block at random sizes and strides, static and symbolic, matches --no-optimize on
//   both backends; a residual on the depthwise conv, a 1x1 output read twice, a grouped 3x3, a
//   stride-2 1x1 and an unpadded 3x3 do not fold).
// - *Dynamic spatial shapes.* Each site keeps a bounded LRU of primitives per concrete shape
//   (DYNVM_DNNL_PRIMITIVE_CACHE entries, default 16; kernels/dnnl/conv.h): a model whose width
//   changes from run to run rebinds only on a width it has not seen recently, and a repeated width
//   binds nothing and allocates nothing of dynvm's own; oneDNN's dnnl_primitive_execute still
//   builds its argument map per execute
//   (DnnlAllocations.ConvAfterWidthChurnAllocatesOnlyOneDnnArgumentMaps). The site's workspace
//   (scratchpad and reordered operands) grows to the largest shape and is reused.
// - *Fusion* (compiler/conv_fusion.cc, run with the other optimizations): every ONNX Conv of f32
//   data with constant weights becomes dynvm::FusedConv, absorbing a zero constant Pad before it
//   (spatial pads added to the Conv's), an inference BatchNormalization after it with constant
//   parameters (folded into the weights and bias at compile time), a residual Add of the same shape
//   (oneDNN sum post-op) and one activation (eltwise post-op): Relu, LeakyRelu, Clip (Relu6),
//   Sigmoid, HardSwish, Tanh, SiLU (x * Sigmoid(x)); then a 1x1 FusedConv takes the 3x3 depthwise
//   FusedConv after it (above; conv_fusion depthwise_pairs in vm-compile --report). A NaN the
//   convolution produces leaves a fused Relu or Clip as 0 or the bound on this backend (oneDNN's
//   max/min); the reference FusedConv kernel (kernels/reference/fused_conv.cc) keeps it.
// - *Against ONNX Runtime* (tools/bench/conv_bench.py, crnn_bench.py; raw output of every run in
//   docs/results/conv-cnn-2026-11-24.txt, conv-crnn-2026-11-24.txt; the machine was shared with
//   other builds, load average 6 to 14, and run-to-run noise is large): outputs match PyTorch to
//   about 1e-6 relative; every conv of resnet18 and mobilenet_v2 is one FusedConv. In the final run
//   at 1 thread dynvm/ORT is 1.09x to 1.21x on mobilenet_v2 (batch 1 and 8, 64x64 and 224x224),
//   0.49x to 0.96x on resnet18 (0.85x to 1.13x in the two runs before it), and 0.97x to 1.08x on
//   the CRNN (widths 100 to 400). Two-thread runs are erratic under the load (OpenMP joins wait for
//   a descheduled thread). Before channels-last propagation, reorders were 39% (resnet18) and 53%
//   (mobilenet_v2) of primitive time and dynvm/ORT was 0.61x to 0.94x (resnet18) and 0.29x to 0.45x
//   (mobilenet_v2). Weights are packed at the first run, not at compile time. On an idle machine
//   before Winograd (conv-cnn-idle-2026-11-25.txt, conv-crnn-idle-2026-11-25.txt): resnet18 0.98x
//   to 1.02x, mobilenet_v2 1.09x to 1.28x, CRNN 0.99x to 1.11x. With Winograd and the small-image
//   GEMM, on the shared machine (load average 3.6 to 4.4; conv-cnn-helper-gemm-2026-11-25.txt,
//   conv-crnn-helper-gemm-2026-11-25.txt, 5 interleaved rounds): resnet18 b8/64 1.30x, b1/224
//   1.36x, b8/224 1.16x, b1/64 0.66x in that run and 0.97x in a 7-round rerun
//   (conv-cnn-helper-gemm-r18b1-2026-11-25.txt; its kernels are those of before but for Winograd on
//   its 16x16 stage, which breaks even: it is bound by reading its 45 MB of packed weights, the
//   512-channel 2x2 stage alone about half of its time); mobilenet_v2 (no dense 3x3 stride-1 convs,
//   no small-image convs) 1.08x to 1.18x, unchanged; CRNN 1.16x to 1.23x (its convs run 1.3x to
//   1.6x faster; its LSTM's per-step GEMV is bound by reading R from L2). Earlier records of this
//   session under heavier load: conv-cnn-helper-winograd*, conv-crnn-helper-winograd*,
//   conv-*-helper-final*. At the branch's last commit, on the machine nearly idle (load average 0.6
//   to 0.8; conv-cnn-helper-last-2026-11-25.txt, conv-crnn-helper-last-2026-11-25.txt): resnet18
//   b1/64 1.10x, b8/64 1.46x, b1/224 1.12x, b8/224 1.23x; mobilenet_v2 1.01x to 1.28x (b8/224
//   1.01x); CRNN 1.21x to 1.26x. On the AVX2 machine that replaced it (AMD EPYC, no AVX-512;
//   docs/benchmarks.md, "AVX2 machine"): CRNN 1.02x to 1.12x (fastest runs; 0.01x to 0.02x before
//   the fixes above), resnet18 and mobilenet_v2 at 64x64 about 1x to 1.3x (0.09x to 0.27x before);
//   with dynvm's own Winograd (above) CRNN 1.31x to 1.54x, resnet18 1.10x to 1.33x.
// - *Tests.* kernels_dnnl_winograd_test: dynvm's Winograd (above); kernels_dnnl_conv_test: every
//   kernel and post-op against the reference kernel and served by oneDNN (no fallback), and the
//   width churn (64 widths, the cache bounded, a cached width rebinds nothing);
//   compiler_conv_fusion_test: fused against unfused output for every fold and post-op, on both
//   backends, 1D/2D/3D, both Pad and Clip opset forms, and compile-time shape errors;
//   onnx_conformance_dnnl --expect-kernels tests/conformance/expected_dnnl_kernels.txt: the ONNX
//   Conv/ConvTranspose/pool/BatchNorm/LRN cases must bind the oneDNN kernel.
#include "kernels/dnnl/conv.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/depthwise.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/cpu/winograd.h"
#include "kernels/dnnl/choice.h"
#include "kernels/dnnl/conv_common.h"
#include "kernels/dnnl/dnnl_kernels.h"
#include "kernels/reference/common.h"

namespace dynvm::onednn {

int ConvCacheCapacity() {
  static const int capacity = [] {
    const char* env = std::getenv("DYNVM_DNNL_PRIMITIVE_CACHE");
    if (env == nullptr) return 16;
    const int v = std::atoi(env);
    return v < 1 ? 1 : std::min(v, 1024);
  }();
  return capacity;
}

ConvCacheStats GetConvCacheStats(const KernelState* state) {
  const auto* c = dynamic_cast<const SiteCache*>(state);
  if (c == nullptr) return {};
  ConvCacheStats stats;
  stats.entries = static_cast<int>(c->entries.size());
  stats.binds = c->binds;
  stats.evictions = c->evictions;
  for (const auto& e : c->entries) {
    stats.winograd += e->winograd ? 1 : 0;
    stats.gemm += e->gemm ? 1 : 0;
    stats.own_winograd += e->own_winograd ? 1 : 0;
    stats.reference_impls += e->reference_impl ? 1 : 0;
    stats.src_reorders += e->src_reorder.bound() ? 1 : 0;
    stats.dst_reorders += e->dst_reorder.bound() ? 1 : 0;
    stats.dw_fused += e->dw_fused ? 1 : 0;
    stats.dw_separate += e->second.bound() ? 1 : 0;
    stats.one_pixel += e->one_pixel ? 1 : 0;
    stats.depthwise_1d += e->depthwise_1d ? 1 : 0;
    stats.pointwise_1d += e->pointwise_1d ? 1 : 0;
    stats.conv1d_gemm += e->conv1d_gemm ? 1 : 0;
    stats.per_image += e->per_image ? 1 : 0;
    stats.row_blocks += static_cast<int>(e->row_blocks.size());
  }
  return stats;
}

Entry* SiteCache::Lookup(const ShapeKey& key, bool* fresh) {
  ++tick;
  for (auto& e : entries) {
    if (e->key == key) {
      e->last_use = tick;
      *fresh = false;
      return e.get();
    }
  }
  *fresh = true;
  ++binds;
  Entry* e = nullptr;
  if (static_cast<int>(entries.size()) < ConvCacheCapacity()) {
    entries.push_back(std::make_unique<Entry>());
    e = entries.back().get();
  } else {
    auto lru = std::min_element(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
      return a->last_use < b->last_use;
    });
    ++evictions;
    *lru = std::make_unique<Entry>();
    e = lru->get();
  }
  e->key = key;
  e->last_use = tick;
  return e;
}

absl::Status BindEntry(Entry* e, absl::string_view what,
                       const std::function<void(const dnnl::engine&)>& bind) {
  DYNVM_ASSIGN_OR_RETURN(const dnnl::engine* engine, CpuEngine());
  absl::Status s = Guard(what, [&] {
    bind(*engine);
    return absl::OkStatus();
  });
  if (!s.ok() && !absl::IsUnimplemented(s)) {
    e->key = ShapeKey();  // never matches again
    return s;
  }
  e->use_fallback = !s.ok();
  return absl::OkStatus();
}

void BindReorder(BoundPrimitive* r, const dnnl::engine& engine, const dnnl::memory::desc& from,
                 const dnnl::memory::desc& to) {
  dnnl::reorder::primitive_desc pd(engine, from, engine, to, UserScratchpadAttr());
  r->Bind(pd, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

size_t Align(size_t bytes) { return (bytes + 63) & ~size_t{63}; }

bool IsReferenceImpl(const dnnl::primitive_desc& pd) {
  return absl::StartsWith(pd.impl_info_str(), "ref");
}

namespace {

using dt = dnnl::memory::data_type;
using reference::Dims;

// ---- Attributes and geometry ----

struct ConvAttrs {
  Dims kernel, strides, pads, dilations, output_padding, output_shape;
  std::string auto_pad = "NOTSET";
  int64_t group = 1;
};

absl::Status ReadConvAttrs(const KernelSpec& spec, bool transpose, ConvAttrs* a) {
  for (auto [name, field] : {std::pair<const char*, Dims*>{"kernel_shape", &a->kernel},
                             {"strides", &a->strides},
                             {"pads", &a->pads},
                             {"dilations", &a->dilations}}) {
    DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> v, spec.GetInts(name));
    field->assign(v.begin(), v.end());
  }
  if (transpose) {
    for (auto [name, field] : {std::pair<const char*, Dims*>{"output_padding", &a->output_padding},
                               {"output_shape", &a->output_shape}}) {
      DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> v, spec.GetInts(name));
      field->assign(v.begin(), v.end());
    }
  }
  DYNVM_ASSIGN_OR_RETURN(std::string ap, spec.GetString("auto_pad", "NOTSET"));
  a->auto_pad = ap.empty() ? "NOTSET" : ap;
  DYNVM_ASSIGN_OR_RETURN(a->group, spec.GetInt("group", 1));
  return absl::OkStatus();
}

// The oneDNN view of one convolution: dims, strides, 0-based dilations and pads, with the end
// padding adjusted so that oneDNN's size formula gives the ONNX output size.
struct Geometry {
  int k = 0;  // spatial dims
  int64_t n = 0, c = 0, m = 0, g = 1;
  int64_t in[3], kd[3], st[3], dl[3], pl[3], pr[3], od[3];
};

int64_t At(const Dims& v, size_t i, int64_t def) { return v.empty() ? def : v[i]; }

// False when the shapes or attributes are invalid (the reference kernel reports why) or outside
// what this kernel takes (more than 3 spatial dims).
bool ConvGeometry(const ConvAttrs& a, const Tensor& x, const Tensor& w, bool transpose,
                  Geometry* g) {
  const int k = x.rank() - 2;
  if (k < 1 || k > 3 || w.rank() != x.rank() || a.group < 1) return false;
  g->k = k;
  g->n = x.dim(0);
  g->c = x.dim(1);
  g->g = a.group;
  if (g->c % g->g != 0) return false;
  if (transpose) {
    if (w.dim(0) != g->c) return false;
    g->m = w.dim(1) * g->g;
  } else {
    g->m = w.dim(0);
    if (g->m % g->g != 0 || w.dim(1) != g->c / g->g) return false;
  }
  const auto sk = static_cast<size_t>(k);
  if ((!a.kernel.empty() && a.kernel.size() != sk) ||
      (!a.strides.empty() && a.strides.size() != sk) ||
      (!a.dilations.empty() && a.dilations.size() != sk) ||
      (!a.pads.empty() && a.pads.size() != 2 * sk) ||
      (!a.output_padding.empty() && a.output_padding.size() != sk)) {
    return false;
  }
  const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
  for (int i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    g->in[i] = x.dim(i + 2);
    g->kd[i] = w.dim(i + 2);
    if (!a.kernel.empty() && a.kernel[u] != g->kd[i]) return false;
    g->st[i] = At(a.strides, u, 1);
    const int64_t dil = At(a.dilations, u, 1);
    if (g->st[i] < 1 || dil < 1) return false;
    g->dl[i] = dil - 1;
    const int64_t span = (g->kd[i] - 1) * dil + 1;
    int64_t pb = 0, pe = 0;
    if (!transpose) {
      if (same) {
        g->od[i] = (g->in[i] + g->st[i] - 1) / g->st[i];
        const int64_t total = std::max<int64_t>(0, (g->od[i] - 1) * g->st[i] + span - g->in[i]);
        pb = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        pe = total - pb;
      } else {
        if (a.auto_pad == "NOTSET" && !a.pads.empty()) {
          pb = a.pads[u];
          pe = a.pads[sk + u];
          if (pb < 0 || pe < 0) return false;
        }
        const int64_t room = g->in[i] + pb + pe - span;
        if (room < 0) return false;
        g->od[i] = room / g->st[i] + 1;
      }
      g->pl[i] = pb;
      g->pr[i] = (g->od[i] - 1) * g->st[i] + span - g->in[i] - pb;
    } else {
      const int64_t opad = At(a.output_padding, u, 0);
      if (!a.output_shape.empty() || same) {
        if (!a.output_shape.empty() && a.output_shape.size() != sk &&
            a.output_shape.size() != sk + 2) {
          return false;
        }
        g->od[i] = !a.output_shape.empty() ? a.output_shape[a.output_shape.size() - sk + u]
                                           : g->in[i] * g->st[i];
        const int64_t total = g->st[i] * (g->in[i] - 1) + opad + span - g->od[i];
        const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
        pb = a.auto_pad == "SAME_UPPER" ? half : total - half;
      } else {
        pb = a.auto_pad == "NOTSET" ? At(a.pads, u, 0) : 0;
        pe = a.auto_pad == "NOTSET" ? At(a.pads, sk + u, 0) : 0;
        g->od[i] = g->st[i] * (g->in[i] - 1) + opad + span - pb - pe;
      }
      if (g->od[i] < 1 || pb < 0) return false;
      g->pl[i] = pb;
      g->pr[i] = (g->in[i] - 1) * g->st[i] + span - pb - g->od[i];
    }
  }
  return true;
}

// Output pixels per image.
int64_t OutPixels(const Geometry& g) {
  int64_t p = 1;
  for (int i = 0; i < g.k; ++i) p *= g.od[i];
  return p;
}

Dims OutDims(const Geometry& g) {
  Dims d = {g.n, g.m};
  for (int i = 0; i < g.k; ++i) d.push_back(g.od[i]);
  return d;
}

// Weights as oneDNN sees them: [g, oc/g, ic/g, K...] (or [oc, ic, K...] without groups) over
// W's strides; a ConvTranspose's W is [C, M/group, K...], input channels first.
dnnl::memory::desc WeightsDesc(const Geometry& g, const Tensor& w, bool transpose) {
  int64_t dims[6], strides[6];
  int r = 0;
  const int64_t oc_g = g.m / g.g, ic_g = g.c / g.g;
  // Strides of W's first two dims read as (output channel within group, input channel).
  const int64_t s_oc = transpose ? w.stride(1) : w.stride(0);
  const int64_t s_ic = transpose ? w.stride(0) : w.stride(1);
  if (g.g > 1) {
    dims[r] = g.g;
    strides[r++] = transpose ? w.stride(0) * ic_g : w.stride(0) * oc_g;
  }
  dims[r] = oc_g;
  strides[r++] = s_oc;
  dims[r] = ic_g;
  strides[r++] = s_ic;
  for (int i = 0; i < g.k; ++i) {
    dims[r] = g.kd[i];
    strides[r++] = w.stride(i + 2);
  }
  return PlainDesc(dt::f32, absl::MakeConstSpan(dims, r), absl::MakeConstSpan(strides, r));
}

// The channels-last layout (NHWC, NDHWC, NWC) of a [N, C, spatial...] tensor.
dnnl::memory::desc BlockedDesc(absl::Span<const int64_t> dims) {
  using tag = dnnl::memory::format_tag;
  const tag t = dims.size() == 3 ? tag::acb : dims.size() == 4 ? tag::acdb : tag::acdeb;
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dt::f32, t);
}

dnnl::memory::desc AnyDesc(absl::Span<const int64_t> dims) {
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dt::f32,
                            dnnl::memory::format_tag::any);
}

// ---- Fused activation ----

struct Activation {
  bool present = false;
  dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
  float alpha = 0, beta = 0;
};

// `attr` "activation", "activation2" (the second post-op) or "dw_activation" (the depthwise
// stage's), with its "_alpha" and "_beta".
absl::StatusOr<Activation> ReadActivation(const KernelSpec& spec,
                                          const std::string& attr = "activation") {
  Activation act;
  DYNVM_ASSIGN_OR_RETURN(std::string name, spec.GetString(attr, ""));
  DYNVM_ASSIGN_OR_RETURN(float alpha, spec.GetFloat(attr + "_alpha", 0.0f));
  DYNVM_ASSIGN_OR_RETURN(float beta, spec.GetFloat(attr + "_beta", 0.0f));
  if (name.empty()) return act;
  act.present = true;
  using alg = dnnl::algorithm;
  if (name == "Relu") {
    act = {true, alg::eltwise_relu, 0.0f, 0.0f};
  } else if (name == "LeakyRelu") {
    act = {true, alg::eltwise_relu, alpha, 0.0f};
  } else if (name == "Clip") {
    act = {true, alg::eltwise_clip_v2, alpha, beta};
  } else if (name == "Sigmoid") {
    act = {true, alg::eltwise_logistic, 0.0f, 0.0f};
  } else if (name == "HardSwish") {
    act = {true, alg::eltwise_hardswish, 0.0f, 0.0f};
  } else if (name == "SiLU") {
    act = {true, alg::eltwise_swish, 1.0f, 0.0f};
  } else if (name == "Tanh") {
    act = {true, alg::eltwise_tanh, 0.0f, 0.0f};
  } else if (name == "Affine") {
    act = {true, alg::eltwise_linear, alpha, beta};
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.op, ": unknown fused activation '", name, "'"));
  }
  return act;
}

// A FusedConv's depthwise stage (inputs 4 and 5; compiler/conv_fusion.h).
struct DepthwiseStage {
  bool present = false;
  Activation act;
  int64_t stride = 1;
};

dnnl::primitive_attr EltwiseAttr(const Activation& act) {
  dnnl::primitive_attr attr = UserScratchpadAttr();
  dnnl::post_ops ops;
  if (act.present) ops.append_eltwise(1.0f, act.alg, act.alpha, act.beta);
  attr.set_post_ops(ops);
  return attr;
}

// A 1x1 + depthwise pair runs as one primitive with oneDNN's depthwise post-op from this many
// elements of the expanded tensor (the 1x1 conv's output, over the batch; 4 MiB of f32): below
// that it stays in cache between the two primitives, and the fused primitive's reorders (it
// takes oneDNN's blocked layouts) cost more than they save. Measured per pair in mobilenet_v2
// at 224x224, 1 thread (docs/results/dwfuse-pairs-final-2026-11-28.txt): from 4.8 MB (batch 8
// 112x112 to 28x28, batch 1 112x112) 1.04x-1.83x faster; at 3.6 MB and below (batch 8 14x14
// and 7x7, batch 1 56x56) 0.57x-0.96x.
constexpr int64_t kFusedDwMinElements = int64_t{1} << 20;

// kFusedDwMinElements, or DYNVM_DNNL_FUSED_DW when set (A/B measurements): 0 never (two
// primitives), N > 0 from N elements (1: every size). Read once.
int64_t FusedDwMinElements() {
  static const int64_t min_elements = [] {
    const char* env = std::getenv("DYNVM_DNNL_FUSED_DW");
    if (env == nullptr) return kFusedDwMinElements;
    const int64_t v = std::atoll(env);
    return v <= 0 ? std::numeric_limits<int64_t>::max() : v;
  }();
  return min_elements;
}

// A buffer of at least `floats` floats (at most kFusedDwMinElements: 4 MiB), 64-byte aligned,
// shared by every 1x1 + depthwise pair run as two primitives on this thread (their expanded
// tensors, one at a time); it grows to that bound, never shrinks, and is outside the VMs'
// memory accounting (docs/kernels.md). nullptr when the allocation fails.
void* SharedMid(size_t floats) {
  struct Buffer {
    std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
    size_t floats = 0;
  };
  thread_local Buffer buf;
  if (buf.floats < floats) {
    buf.data.reset(static_cast<float*>(std::aligned_alloc(64, Align(floats * sizeof(float)))));
    buf.floats = buf.data != nullptr ? floats : 0;
  }
  return buf.data.get();
}

// Which FusedConv operands hold the channels-last layout (set by the compiler's layout pass
// between FusedConvs; the tensors keep their logical dims).
struct BlockedPorts {
  bool in = false, out = false, sum = false;
};

// ---- Packed constant weights, shared by every VM running the kernel ----

class PackedWeightsCache {
 public:
  // The packed copy of `w` in `desc`, packing it with `reorder` on first use; nullptr when the
  // cache is full (the caller packs into its workspace).
  absl::StatusOr<const void*> Get(const void* w, const dnnl::memory::desc& desc,
                                  const BoundPrimitive& reorder) const {
    return Get(w, desc, desc.get_size(), [&](void* to) {
      std::vector<char> scratch(reorder.scratchpad_bytes());
      return reorder.Execute({w, to}, scratch.data());
    });
  }

  // The same for a packing of `bytes` that `pack(to)` writes; `desc` tells packings apart.
  absl::StatusOr<const void*> Get(const void* w, const dnnl::memory::desc& desc, size_t bytes,
                                  absl::FunctionRef<absl::Status(void*)> pack) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Packed& p : packed_) {
      if (p.source == w && p.desc == desc) return static_cast<const void*>(p.data.get());
    }
    if (packed_.size() >= kMaxEntries) return static_cast<const void*>(nullptr);
    Packed p;
    p.source = w;
    p.desc = desc;
    p.data.reset(static_cast<char*>(std::aligned_alloc(64, Align(bytes))));
    if (p.data == nullptr) return absl::ResourceExhaustedError("packing conv weights");
    DYNVM_RETURN_IF_ERROR(pack(p.data.get()));
    packed_.push_back(std::move(p));
    return static_cast<const void*>(packed_.back().data.get());
  }

 private:
  static constexpr size_t kMaxEntries = 64;
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  struct Packed {
    const void* source = nullptr;
    dnnl::memory::desc desc;
    std::unique_ptr<char, Free> data;
  };
  mutable std::mutex mu_;
  mutable std::vector<Packed> packed_;
};

// ---- Conv, ConvTranspose, FusedConv ----

// Winograd thresholds (UseWinograd), from per-primitive timings (ONEDNN_VERBOSE) of
// tools/bench conv_bench.py's resnet18 and crnn_bench.py's CRNN at every size they run.
constexpr int64_t kWinogradMinChannels = 32;
// Output channels from which oneDNN's Winograd is asked for (with kWinogradMinChannels inputs):
// DBNet's FPN head convs (PaddleOCR v4 detection, 96 -> 24 channels, 3x3, 120x184 pixels at
// 480x736 input) ran 13.8 ms each on the direct algorithm and about 6 ms on Winograd (AVX-512,
// 1 thread, per-node minima of vm-run --profile on the shared machine).
constexpr int64_t kWinogradMinOutChannels = 16;
// Output pixels per image up to which a channels-last FusedConv runs as one GEMM (UseGemm),
// when the GEMM has at least kGemmMinRows rows (output pixels over the batch): sgemm packs its
// weight operand per call, which fewer rows do not repay (resnet18's 4x4 and 2x2 stages at
// batch 1 run 1.4x slower that way, at batch 8 twice as fast).
constexpr int64_t kGemmMaxPixels = 16;
constexpr int64_t kGemmMinRows = 32;
// The im2col matrix lives in the site's workspace: bigger ones (huge batches) stay on oneDNN.
constexpr int64_t kGemmMaxColumnFloats = int64_t{1} << 23;  // 32 MiB
constexpr int64_t kWinogradMinPixels = 96;  // output pixels per image (e.g. 4 x 24, 10 x 10)
// dynvm's own Winograd F(2x2, 3x3) (OwnWinogradTakes): from this many input and output channels
// and output tiles (2x2 pixels) over the batch.
constexpr int64_t kOwnWinogradMinChannels = 32;
constexpr int64_t kOwnWinogradMinTiles = 16;

class ConvKernel final : public DnnlKernel {
 public:
  ConvKernel(std::string name, ConvAttrs attrs, bool transpose, Activation act, Activation act2,
             bool constant_weights, BlockedPorts blocked, DepthwiseStage dw)
      : DnnlKernel(std::move(name)),
        attrs_(std::move(attrs)),
        transpose_(transpose),
        act_(act),
        act2_(act2),
        constant_weights_(constant_weights),
        blocked_(blocked),
        dw_(dw) {}

  absl::Status Run(KernelContext& ctx, Inputs in, Outputs out) const override {
    DYNVM_RETURN_IF_ERROR(CheckPresent(in, 2, out, transpose_ ? "ConvTranspose" : "Conv"));
    if (dw_.present) return RunPair(ctx, in, out);
    const Tensor& x = *in[0];
    const Tensor& w = *in[1];
    const Tensor* b = in.size() > 2 ? in[2] : nullptr;
    const Tensor* sum = in.size() > 3 ? in[3] : nullptr;
    Geometry g;
    if (x.dtype() != DType::kF32 || w.dtype() != DType::kF32 || x.numel() == 0 || w.numel() == 0 ||
        !ConvGeometry(attrs_, x, w, transpose_, &g) ||
        (b != nullptr &&
         (b->dtype() != DType::kF32 || b->rank() != 1 || b->dim(0) != g.m || b->stride(0) != 1))) {
      return RunFallback(ctx, in, out);  // reports the error, if any
    }
    // Channels-last operands are read as dense NHWC buffers: only contiguous tensors qualify
    // (the reference kernel rejects the others).
    if ((blocked_.in && !x.is_contiguous()) ||
        (blocked_.sum && sum != nullptr && !sum->is_contiguous())) {
      return RunFallback(ctx, in, out);
    }
    const Dims out_dims = OutDims(g);
    if (sum != nullptr &&
        (sum->dtype() != DType::kF32 || sum->dims() != absl::MakeConstSpan(out_dims))) {
      return RunFallback(ctx, in, out);
    }
    int64_t macs = g.n * g.m * (g.c / g.g);
    for (int i = 0; i < g.k; ++i) macs *= g.od[i] * g.kd[i];
    SetThreads(ThreadsFor(ctx.num_threads(), macs));
    if (transpose_ && DeconvAsGemm(g) && x.is_contiguous() && w.is_contiguous()) {
      DYNVM_RETURN_IF_ERROR(
          reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims, "ConvTranspose"));
      if (out[0]->is_contiguous()) return ExecuteDeconvGemm(ctx, g, x, w, b, out[0]);
    }
    ShapeKey key;
    key.Add(&x);
    key.Add(&w);
    key.Add(b != nullptr);
    key.Add(sum);
    key.Add(ctx.num_threads());
    SiteCache* st = SiteState<SiteCache>(ctx);
    bool fresh = false;
    Entry* e = st->Lookup(key, &fresh);
    if (fresh) {
      // dynvm's Winograd before the GEMM where both take a shape (a 4x4 image over a batch):
      // 2.25x fewer multiply-adds than the direct convolution against 1x, measured 2.8-4x faster.
      const bool one_pixel = OnePixelTakes(g, x, w, sum);
      const bool own_winograd = OwnWinogradTakes(g, sum), gemm = UseGemm(g, sum);
      const bool depthwise_1d = Depthwise1dTakes(g, x, w, sum);
      const bool pointwise_1d = Pointwise1dTakes(g, x, w, sum);
      const bool conv1d_gemm = !pointwise_1d && Conv1dGemmTakes(ctx, g, x, w, sum, macs);
      DYNVM_RETURN_IF_ERROR(BindEntry(
          e, transpose_ ? "deconvolution" : "convolution", [&](const dnnl::engine& engine) {
            if (one_pixel) {
              e->one_pixel = true;
            } else if (depthwise_1d) {
              e->depthwise_1d = true;
            } else if (pointwise_1d) {
              e->pointwise_1d = true;
            } else if (conv1d_gemm) {
              e->conv1d_gemm = true;
            } else if (own_winograd &&
                       choice::UseOwnWinograd(UseWinograd(g) &&
                                              OneDnnHasWinograd(engine, g, x, b != nullptr, sum))) {
              e->own_winograd = true;
            } else if (gemm) {
              BindGemm(engine, g, w, e);
            } else {
              Bind(engine, g, x, w, b != nullptr, sum, out_dims, e);
            }
          }));
    }
    if (e->use_fallback) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(reference::PrepareOutput(ctx, out[0], DType::kF32, out_dims,
                                                   transpose_ ? "ConvTranspose" : "Conv"));
    if (e->one_pixel) return ExecuteOnePixel(ctx, g, x, w, b, sum, out[0]);
    if (e->depthwise_1d) return ExecuteDepthwise1d(ctx, g, x, w, b, out[0]);
    if (e->pointwise_1d) return ExecutePointwise1d(ctx, g, x.data<float>(), w, b, out[0]);
    if (e->conv1d_gemm) return ExecuteConv1dGemm(ctx, g, x, w, b, out[0]);
    if (e->gemm) return ExecuteGemm(ctx, *e, g, x, w, b, sum, out[0]);
    if (e->own_winograd) return ExecuteOwnWinograd(ctx, g, x, w, b, sum, out[0]);
    if (PerImageTakes(ctx, g, macs, *out[0])) {
      DYNVM_ASSIGN_OR_RETURN(const Entry* e1, ImageEntry(ctx, st, g, x, w, b, sum));
      if (e1 != nullptr) return ExecutePerImage(ctx, *e1, g, x, w, b, sum, out[0]);
    }
    if (const int64_t blocks = RowBlocks(ctx, g, macs, x, *out[0], sum); blocks > 1) {
      DYNVM_RETURN_IF_ERROR(BindRowBlocks(g, x, w, b != nullptr, sum, *out[0], blocks, e));
      if (!e->row_blocks.empty()) return ExecuteRowBlocks(ctx, *e, g, x, w, b, sum, out[0]);
    }
    return Execute(ctx, *e, x, w, b, sum, out[0]);
  }

 private:
  // ---- Splitting dynvm's own convolution loops over the VM's pool ----
  //
  // The smallest task a convolution's work splits into for the VM's threads (a block of rows,
  // channels or images): the fork/join costs 0.2-1 us with a spinning worker, and 128K
  // multiply-adds take about 3 us on one core (oneDNN's direct convolution ran the openWakeWord
  // embedding model's batch-1 convs at 44 G multiply-adds a second on the Zen 4 development
  // machine), so it stays under a tenth. Was kMinParallelWork (4M, sized for an OpenMP team on
  // a shared machine) before the dynamic split: a batch-1 conv below it ran on one thread.
  static constexpr int64_t kMinConvTaskMacs = int64_t{1} << 17;

  // The chunk (in units) that splits `units` units of `macs` multiply-adds in all over the VM's
  // threads with ctx.ParallelForDynamic: at most two chunks per thread (a thread whose core is
  // busy leaves the rest to the others), each of at least kMinConvTaskMacs; `units` (one
  // chunk: one thread) at one thread or below that.
  static int64_t ConvChunk(const KernelContext& ctx, int64_t units, int64_t macs) {
    if (ctx.num_threads() < 2 || units < 2) return std::max<int64_t>(units, 1);
    const int64_t by_work = macs / kMinConvTaskMacs;
    const int64_t by_threads = 2 * static_cast<int64_t>(ctx.ParallelTasks(units, 1));
    const int64_t chunks = std::max<int64_t>(1, std::min({by_work, by_threads, units}));
    return (units + chunks - 1) / chunks;
  }

  // ---- A depthwise Conv1d on dynvm's microkernel ----

  // The activation of act_ as cpu::BiasActivationRows applies it (kNone without one); nullopt
  // for those it does not have (Clip, HardSwish, LeakyRelu, Affine).
  std::optional<cpu::Activation> RowActivation() const {
    if (!act_.present) return cpu::Activation::kNone;
    using alg = dnnl::algorithm;
    if (act_.alg == alg::eltwise_relu && act_.alpha == 0.0f) return cpu::Activation::kRelu;
    if (act_.alg == alg::eltwise_logistic) return cpu::Activation::kSigmoid;
    if (act_.alg == alg::eltwise_swish && act_.alpha == 1.0f) return cpu::Activation::kSilu;
    if (act_.alg == alg::eltwise_tanh) return cpu::Activation::kTanh;
    return std::nullopt;
  }

  // A depthwise Conv1d (group == input == output channels) of stride 1, any dilation and pads,
  // over a plain (NCW) dense input, written plain or channels-last, without a residual or a
  // second activation and with at most one of RowActivation's: the depthwise conv of a
  // conformer's convolution module or a TCN. oneDNN 2.6 has no optimized kernel for the plain
  // layout (it ran a conformer's [1, 256, 400] k=15 conv in 2.6 ms, this loop in about 0.05 ms).
  bool Depthwise1dTakes(const Geometry& g, const Tensor& x, const Tensor& w,
                        const Tensor* sum) const {
    return !transpose_ && g.k == 1 && g.g == g.c && g.m == g.c && g.st[0] == 1 && g.pl[0] >= 0 &&
           !blocked_.in && x.is_contiguous() && w.is_contiguous() && sum == nullptr &&
           !act2_.present && RowActivation().has_value() && !dw_.present;
  }

  // Per task a block of kDepthwiseChannels channels of one image: each channel's row copied
  // between zeros (its padding), convolved by cpu::DepthwiseConv1dRow with its bias, activated,
  // and stored (channels-last: through a [channels, time] buffer, transposed as it is stored).
  absl::Status ExecuteDepthwise1d(KernelContext& ctx, const Geometry& g, const Tensor& x,
                                  const Tensor& w, const Tensor* b, Tensor* y) const {
    constexpr int64_t kDepthwiseChannels = 16;
    const int64_t c = g.c, in = g.in[0], out = g.od[0], taps = g.kd[0], dil = g.dl[0] + 1;
    const int64_t pl = g.pl[0], padded = std::max(pl + in, out + (taps - 1) * dil);
    const int64_t per_image = (c + kDepthwiseChannels - 1) / kDepthwiseChannels;
    const int64_t blocks = g.n * per_image;
    // Channel blocks claimed dynamically by the VM's threads in ConvChunk's chunks.
    const int64_t chunk = ConvChunk(ctx, blocks, g.n * c * out * taps);
    const int tasks = ctx.ParallelTasks((blocks + chunk - 1) / chunk, 1);
    const size_t per_task = Align(static_cast<size_t>(
        (padded + (blocked_.out ? kDepthwiseChannels * out : 0)) * sizeof(float)));
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(per_task * tasks + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    const cpu::Activation act = *RowActivation();
    const float* px = x.data<float>();
    const float* pw = w.data<float>();
    const float* pb = b != nullptr ? b->data<float>() : nullptr;
    float* py = y->data<float>();
    const bool channels_last = blocked_.out;
    ctx.ParallelForDynamic(blocks, chunk, [&](int t, int64_t b0, int64_t b1) {
      float* xp = reinterpret_cast<float*>(base + per_task * t);
      float* rows = xp + padded;
      std::fill(xp, xp + pl, 0.0f);
      std::fill(xp + pl + in, xp + padded, 0.0f);
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t n = blk / per_image, c0 = blk % per_image * kDepthwiseChannels;
        const int64_t c1 = std::min(c, c0 + kDepthwiseChannels);
        for (int64_t ch = c0; ch < c1; ++ch) {
          std::memcpy(xp + pl, px + (n * c + ch) * in, static_cast<size_t>(in) * sizeof(float));
          float* row = channels_last ? rows + (ch - c0) * out : py + (n * c + ch) * out;
          cpu::DepthwiseConv1dRow(out, xp, pw + ch * taps, taps, dil, pb != nullptr ? pb[ch] : 0.0f,
                                  row);
          if (act != cpu::Activation::kNone)
            cpu::BiasActivationRows(act, 1, out, nullptr, row, out);
        }
        if (!channels_last) continue;
        for (int64_t i = 0; i < out; ++i) {
          float* yi = py + (n * out + i) * c + c0;
          for (int64_t ch = 0; ch < c1 - c0; ++ch) yi[ch] = rows[ch * out + i];
        }
      }
    });
    return absl::OkStatus();
  }

  // ---- A pointwise Conv1d as sgemm on the VM's threads ----

  // A pointwise Conv1d (kernel 1, stride 1, unpadded, ungrouped) with a dense input and weights,
  // no residual, no second activation and at most one of RowActivation's: per image the GEMM
  // Y [M, T] = W [M, C] X [C, T] (transposed operands for channels-last ports), which
  // dnnl_sgemm runs on each range of output rows on the VM's threads. oneDNN's 1x1 convolution
  // of these shapes (a conformer's convolution module, a TCN) runs on an OpenMP team of its own,
  // whose joins wait on a descheduled thread when the machine is shared.
  bool Pointwise1dTakes(const Geometry& g, const Tensor& x, const Tensor& w,
                        const Tensor* sum) const {
    return !transpose_ && g.k == 1 && g.g == 1 && g.kd[0] == 1 && g.st[0] == 1 && g.pl[0] == 0 &&
           g.pr[0] == 0 && x.is_contiguous() && w.is_contiguous() && sum == nullptr &&
           !act2_.present && RowActivation().has_value() && !dw_.present;
  }

  // Rows [r0, r1) of image n: output channels (plain Y) or time steps (channels-last Y); the
  // bias and activation on those rows after their product.
  dnnl_status_t Pointwise1dRows(const Geometry& g, const float* x, const float* w, const float* b,
                                cpu::Activation act, float* y, int64_t n, int64_t r0,
                                int64_t r1) const {
    const int64_t c = g.c, m = g.m, t = g.in[0], rows = r1 - r0;
    const float* xn = x + n * c * t;
    if (!blocked_.out) {  // Y[n] rows r0..r1 = W[r0..r1] (M x C) . X[n] (C x T)
      float* yn = y + (n * m + r0) * t;
      const dnnl_status_t s =
          blocked_.in ? dnnl_sgemm('N', 'T', rows, t, c, 1.0f, w + r0 * c, c, xn, c, 0.0f, yn, t)
                      : dnnl_sgemm('N', 'N', rows, t, c, 1.0f, w + r0 * c, c, xn, t, 0.0f, yn, t);
      if (s != dnnl_success) return s;
      for (int64_t r = 0; r < rows; ++r) {
        float* row = yn + r * t;
        if (b != nullptr) {
          const float bias = b[r0 + r];
          for (int64_t i = 0; i < t; ++i) row[i] += bias;
        }
        if (act != cpu::Activation::kNone) cpu::BiasActivationRows(act, 1, t, nullptr, row, t);
      }
      return dnnl_success;
    }
    // Y[n] (T x M) rows r0..r1 = X[n]^T (T x C) . W^T (C x M)
    float* yn = y + (n * t + r0) * m;
    const dnnl_status_t s =
        blocked_.in ? dnnl_sgemm('N', 'T', rows, m, c, 1.0f, xn + r0 * c, c, w, c, 0.0f, yn, m)
                    : dnnl_sgemm('T', 'T', rows, m, c, 1.0f, xn + r0, t, w, c, 0.0f, yn, m);
    if (s != dnnl_success) return s;
    if (b != nullptr || act != cpu::Activation::kNone) {
      cpu::BiasActivationRows(act, rows, m, b, yn, m);
    }
    return dnnl_success;
  }

  // `px`: the input's floats (X, [N, C, T] or channels-last [N, T, C]).
  absl::Status ExecutePointwise1d(KernelContext& ctx, const Geometry& g, const float* px,
                                  const Tensor& w, const Tensor* b, Tensor* y) const {
    const int64_t per_image = blocked_.out ? g.in[0] : g.m;
    const cpu::Activation act = *RowActivation();
    const float* pw = w.data<float>();
    const float* pb = b != nullptr ? b->data<float>() : nullptr;
    float* py = y->data<float>();
    const int64_t total = g.n * per_image;
    const int64_t chunk = std::max<int64_t>(16, ConvChunk(ctx, total, g.n * g.m * g.c * g.in[0]));
    SetThreads(1);
    if (chunk >= total) {
      for (int64_t n = 0; n < g.n; ++n) {
        DYNVM_RETURN_IF_ERROR(
            FromDnnl(Pointwise1dRows(g, px, pw, pb, act, py, n, 0, per_image), "dnnl_sgemm"));
      }
      return absl::OkStatus();
    }
    // Rows of every image in chunks claimed by the pool's threads; a chunk may span images.
    std::atomic<int> failed{dnnl_success};
    ctx.ParallelForDynamic(total, chunk, [&](int, int64_t i0, int64_t i1) {
      SetThreads(1);
      while (i0 < i1) {
        const int64_t n = i0 / per_image, r0 = i0 % per_image;
        const int64_t r1 = std::min(per_image, r0 + (i1 - i0));
        const dnnl_status_t s = Pointwise1dRows(g, px, pw, pb, act, py, n, r0, r1);
        if (s != dnnl_success) failed.store(s, std::memory_order_relaxed);
        i0 += r1 - r0;
      }
    });
    return FromDnnl(static_cast<dnnl_status_t>(failed.load()), "dnnl_sgemm");
  }

  // ---- A convolution of one-pixel images as a matrix product ----

  // An ungrouped convolution whose images are one pixel and whose kernel is 1 on every spatial
  // dim, unpadded (any stride or dilation: the output is one pixel too): a squeeze-excitation
  // block's two convolutions after its global pool (MobileNetV3, EfficientNet, RegNetY, and the
  // detectors and segmenters on them), LR-ASPP's scale branch, a classifier written as a 1x1
  // conv. One pixel has the same bytes plain and channels-last, so the ports' layouts do not
  // matter. It is y[n, :] = W [M, C] x[n, :] (plus the residual), then the bias and the
  // activations per element. Constant weights (AVX2 and up): W packed once into the packed
  // GEMM's 16-column panels, one image by packed_gemm::MultiplyVector (one sequential stream per
  // panel), a batch by packed_gemm::Multiply where choice::UsePackedGemm takes its rows
  // (ExecutePacked); otherwise cpu::Gemv at batch 1 (choice::UseGemv) or one dnnl_sgemm over the
  // batch. The product is bound by reading W (MobileNetV3's 960 -> 240 and 240 -> 960 SE convs:
  // 0.9 MB each): oneDNN's convolution ran them in 62-73 us a call, the packed GEMV in 43-45
  // (cpu::Gemv's dot form, the [M, C] rows as they are, took 54 and 85: its rows of 240 are short)
  // (per-site medians of vm-run --profile, best of 3 interleaved rounds on the shared Zen 4;
  // docs/results/mobilecnn-s9-2026-11-30.txt).
  bool OnePixelTakes(const Geometry& g, const Tensor& x, const Tensor& w, const Tensor* sum) const {
    if (transpose_ || dw_.present || g.g != 1) return false;
    for (int i = 0; i < g.k; ++i) {
      if (g.in[i] != 1 || g.kd[i] != 1 || g.pl[i] != 0 || g.pr[i] != 0) return false;
    }
    return x.is_contiguous() && w.is_contiguous() && (sum == nullptr || sum->is_contiguous());
  }

  // `a` applied to v[0, count) in place, as oneDNN's eltwise post-op computes it (Relu and Clip
  // give 0 / the bound for NaN: oneDNN's max and min drop it).
  static void ActivateInPlace(const Activation& a, float* v, int64_t count) {
    using alg = dnnl::algorithm;
    if (!a.present) return;
    for (int64_t i = 0; i < count; ++i) {
      const float x = v[i];
      float r = x;
      switch (a.alg) {
        case alg::eltwise_relu:
          r = x > 0.0f ? x : (a.alpha == 0.0f ? 0.0f : a.alpha * x);
          break;
        case alg::eltwise_clip_v2:
          r = x > a.alpha ? x : a.alpha;
          r = r < a.beta ? r : a.beta;
          break;
        case alg::eltwise_logistic:
          r = 1.0f / (1.0f + std::exp(-x));
          break;
        case alg::eltwise_hardswish: {
          const float t = std::min(std::max(x + 3.0f, 0.0f), 6.0f);
          r = x * t / 6.0f;
          break;
        }
        case alg::eltwise_swish:
          r = x / (1.0f + std::exp(-a.alpha * x));
          break;
        case alg::eltwise_tanh:
          r = std::tanh(x);
          break;
        case alg::eltwise_linear:
          r = a.alpha * x + a.beta;
          break;
        default:
          break;
      }
      v[i] = r;
    }
  }

  absl::Status ExecuteOnePixel(KernelContext& ctx, const Geometry& g, const Tensor& x,
                               const Tensor& w, const Tensor* b, const Tensor* sum,
                               Tensor* y) const {
    if (constant_weights_ && cpu::ActiveIsa() >= cpu::Isa::kAvx2 && OnePixelPackedOn() &&
        (g.n == 1 || choice::UsePackedGemm(g.n, g.m, g.c))) {
      return ExecutePacked(ctx, g, g.n, x, w, b, sum, y);
    }
    const int64_t n = g.n, c = g.c, m = g.m;
    const float* px = x.data<float>();
    const float* pw = w.data<float>();
    float* py = y->data<float>();
    float beta = 0.0f;
    if (sum != nullptr) {
      const float* ps = sum->data<float>();
      if (ps != py) std::memmove(py, ps, static_cast<size_t>(n * m) * sizeof(float));
      beta = 1.0f;
    }
    if (n == 1 && choice::UseGemv(m, c, 1)) {
      cpu::Gemv('T', m, c, 1.0f, px, pw, c, beta, py);
    } else {
      DYNVM_RETURN_IF_ERROR(
          FromDnnl(dnnl_sgemm('N', 'T', n, m, c, 1.0f, px, c, pw, c, beta, py, m), "dnnl_sgemm"));
    }
    // oneDNN's order: bias, the residual sum (already in y), then the activations. The bias is
    // added after the product; with a residual that is (Wx + sum) + b, the same terms.
    const float* pb = b != nullptr ? b->data<float>() : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      float* row = py + i * m;
      if (pb != nullptr) {
        for (int64_t j = 0; j < m; ++j) row[j] += pb[j];
      }
      ActivateInPlace(act_, row, m);
      ActivateInPlace(act2_, row, m);
    }
    return absl::OkStatus();
  }

  // DYNVM_DNNL_ONE_PIXEL_PACKED=0 keeps one-pixel convolutions with constant weights off the
  // packed GEMM (cpu::Gemv or dnnl_sgemm instead; A/B measurements). Read once.
  static bool OnePixelPackedOn() {
    static const bool on = [] {
      const char* env = std::getenv("DYNVM_DNNL_ONE_PIXEL_PACKED");
      return env == nullptr || std::atoi(env) != 0;
    }();
    return on;
  }

  // Y [rows, M] = X [rows, C] W^T on the packed GEMM (W [M, C] packed once per kernel into
  // 16-column panels, kernels/cpu/packed_gemm.h), then the bias, the residual and the
  // activations on each block in cache. One row runs packed_gemm::MultiplyVector (one
  // sequential stream per panel), more packed_gemm::Multiply; at more than one thread the
  // panels are split over the VM's pool.
  absl::Status ExecutePacked(KernelContext& ctx, const Geometry& g, int64_t rows, const Tensor& x,
                             const Tensor& w, const Tensor* b, const Tensor* sum, Tensor* y) const {
    const int64_t c = g.c, m = g.m;
    const int64_t floats = cpu::packed_gemm::PackedFloats(c, m);
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    // A key no oneDNN layout has: the packed GEMM's panels of [M, C].
    const dnnl::memory::desc key({floats, c, m}, dt::f32, dnnl::memory::format_tag::abc);
    auto pack = [&](void* to) {
      cpu::packed_gemm::Pack('T', c, m, w.data<float>(), c, static_cast<float*>(to));
      return absl::OkStatus();
    };
    DYNVM_ASSIGN_OR_RETURN(const void* cached, packed_.Get(w.raw_data(), key, bytes, pack));
    float* py = y->data<float>();
    const float* ps = sum != nullptr ? sum->data<float>() : nullptr;
    const size_t sum_bytes = ps == py ? Align(static_cast<size_t>(rows * m) * sizeof(float)) : 0;
    const size_t w_bytes = cached == nullptr ? Align(bytes) : 0;
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(sum_bytes + w_bytes + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    if (sum_bytes > 0) {  // the residual is the output's buffer: kept apart before it is written
      std::memcpy(base, ps, static_cast<size_t>(rows * m) * sizeof(float));
      ps = reinterpret_cast<const float*>(base);
    }
    const float* packed = static_cast<const float*>(cached);
    if (packed == nullptr) {  // the kernel's packed-weights cache is full: pack per run
      float* to = reinterpret_cast<float*>(base + sum_bytes);
      DYNVM_RETURN_IF_ERROR(pack(to));
      packed = to;
    }
    const float* px = x.data<float>();
    const float* pb = b != nullptr ? b->data<float>() : nullptr;
    using cpu::packed_gemm::kPanel;
    const int64_t panels = (m + kPanel - 1) / kPanel;
    // Columns [col0, col0 + nc) of rows [r0, r0 + nr): bias, residual, activations.
    auto epilogue = [&](int64_t r0, int64_t nr, int64_t col0, int64_t nc) {
      for (int64_t r = r0; r < r0 + nr; ++r) {
        float* yr = py + r * m + col0;
        if (pb != nullptr) {
          for (int64_t j = 0; j < nc; ++j) yr[j] += pb[col0 + j];
        }
        if (ps != nullptr) {
          const float* sr = ps + r * m + col0;
          for (int64_t j = 0; j < nc; ++j) yr[j] += sr[j];
        }
        ActivateInPlace(act_, yr, nc);
        ActivateInPlace(act2_, yr, nc);
      }
    };
    auto run = [&](int64_t p0, int64_t p1) {
      const int64_t j0 = p0 * kPanel, cols = std::min(m, p1 * kPanel) - j0;
      if (rows == 1) {
        cpu::packed_gemm::MultiplyVector(p0, p1, m, c, px, packed, py);
        epilogue(0, 1, j0, cols);
        return;
      }
      cpu::packed_gemm::Multiply(
          0, rows, cols, c, px, c, packed + j0 * c, py + j0, m,
          [&](int64_t r0, int64_t nr, int64_t c0, int64_t nc) { epilogue(r0, nr, j0 + c0, nc); });
    };
    const int64_t macs = rows * c * m;
    if (ctx.num_threads() < 2 || panels < 2 || macs < 2 * kMinConvTaskMacs) {
      run(0, panels);
    } else {
      ctx.ParallelFor(panels, std::max<int64_t>(1, panels * kMinConvTaskMacs / macs),
                      [&](int64_t p0, int64_t p1) { run(p0, p1); });
    }
    return absl::OkStatus();
  }

  // ---- Any other Conv1d as im2col + sgemm on the VM's threads ----

  // A Conv1d of any kernel size, stride, padding and dilation, ungrouped, over a plain dense
  // input, with dense weights, no residual, no second activation and at most one of
  // RowActivation's, at more than one thread where oneDNN would run its OpenMP team (from
  // kMinParallelWork multiply-adds, unless the per-image split takes the batch): per image the
  // columns X' [C * K, T_out] (row (c, k) holds input channel c at t * stride + k * dilation -
  // pad, zero outside the input), then the pointwise path's GEMM Y [M, T_out] = W [M, C * K] X'
  // on chunks of output rows claimed by the VM's threads. oneDNN's team there ran the
  // openWakeWord STFT front end at 2 threads in 9.2 ms a call against 0.36 ms at 1 (spinning
  // beside the pool), and split by its only spatial dim each block took twice its share
  // (docs/zoo.md). Below kMinParallelWork oneDNN's primitive runs on one thread, which beat this
  // path at 2 threads on the STFT's 8-frame chunk (0.064 against 0.077 ms for the model); the
  // per-image split ran the 2x4000 case 5-8% faster. One thread keeps oneDNN's primitive.
  bool Conv1dGemmTakes(const KernelContext& ctx, const Geometry& g, const Tensor& x,
                       const Tensor& w, const Tensor* sum, int64_t macs) const {
    const int tasks = ctx.ParallelTasks(g.n, 1);  // as PerImageTakes
    const bool per_image = g.n >= 2 && tasks > 1 && (g.n % tasks == 0 || g.n >= 4 * tasks);
    // A batch the per-image split takes stays there unless its product is weight-bound
    // (WeightRowsAcrossImages): then from the per-image split's own threshold.
    if (per_image && !(WeightRowsAcrossImages(ctx, g) && macs >= kMinParallelGemm)) return false;
    return !transpose_ && g.k == 1 && g.g == 1 && ctx.num_threads() > 1 &&
           (per_image || macs >= kMinParallelWork) && !blocked_.in && x.is_contiguous() &&
           w.is_contiguous() && sum == nullptr && !act2_.present && RowActivation().has_value() &&
           !dw_.present && g.n * g.c * g.kd[0] * g.od[0] <= kGemmMaxColumnFloats;
  }

  // Whether a batched Conv1d's GEMM splits over the threads by chunks of output channels, each
  // chunk one sgemm over the columns of every image side by side (X' [C * K, N * T_out]),
  // rather than by images: where each image has fewer output steps than the conv has output
  // channels, the product is bound by reading (and packing) W, which a split by images does
  // whole on every thread and for every image (the openWakeWord STFT conv at 2x4000 samples,
  // 257 channels x 512 taps over 22 frames: one image's sgemm 76 us, both images' in one call
  // 110 us, oneDNN's primitive 114 us for the batch on one thread, and the per-image split
  // 0.11-0.22 ms an image side by side). Split by channels, each thread packs its part of W
  // once for all images, and a thread that does not get its core leaves its chunks to the other.
  // From kAcrossMinColumns columns (N * T_out) only: the sgemm packs its part of W on every call,
  // which below that costs more than the product, and oneDNN's primitive (W packed once) is the
  // faster one (Silero v5's STFT conv at 2x576 samples, 258 x 256 taps over 4 frames, 8
  // columns: 15 us for the batch on oneDNN against 26 us as sgemm; the 2x4000 STFT, 44 columns:
  // 114 against 110-112 us; Silero legacy's at 2x1536, 48 columns: 63 against 56 us).
  static constexpr int64_t kAcrossMinColumns = 32;
  bool WeightRowsAcrossImages(const KernelContext& ctx, const Geometry& g) const {
    return ctx.num_threads() > 1 && g.n >= 2 && g.k == 1 && g.od[0] < g.m &&
           g.n * g.od[0] >= kAcrossMinColumns;
  }

  // Row (c, k) of image n's columns, [t0, t1) of its T_out: input channel c at t * stride +
  // k * dilation - pad_left, 0 where that falls outside the input.
  // `across`: row r of the columns [N, C * K, T_out] lands at (c, k)'s row of [C * K, N * T_out]
  // instead, image n's T_out columns at n * T_out.
  static void Conv1dColumns(const Geometry& g, const float* x, float* cols, int64_t r0, int64_t r1,
                            bool across) {
    const int64_t taps = g.kd[0], in = g.in[0], out = g.od[0];
    const int64_t st = g.st[0], dil = g.dl[0] + 1, pl = g.pl[0], ck = g.c * taps;
    // r = (n * C + ch) * K + k = n * ck + j, counted up (a division per row cost as much as the
    // copy: 20-30 us for the 2x4000 STFT's 1024 rows of 22).
    int64_t k = r0 % taps, nc = r0 / taps, j = r0 % ck, n = r0 / ck;
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + nc * in;
      float* row = cols + (across ? (j * g.n + n) * out : r * out);
      const int64_t off = k * dil - pl;  // input index of output t: t * st + off
      // Outputs reading inside the input: t * st + off in [0, in).
      const int64_t t0 = std::min(out, off >= 0 ? 0 : (-off + st - 1) / st);
      const int64_t t1 = std::max(t0, std::min(out, in - off <= 0 ? 0 : (in - off + st - 1) / st));
      std::fill(row, row + t0, 0.0f);
      if (st == 1) {
        std::memcpy(row + t0, xr + t0 + off, static_cast<size_t>(t1 - t0) * sizeof(float));
      } else {
        for (int64_t t = t0; t < t1; ++t) row[t] = xr[t * st + off];
      }
      std::fill(row + t1, row + out, 0.0f);
      if (++k == taps) {
        k = 0;
        ++nc;
      }
      if (++j == ck) {
        j = 0;
        ++n;
      }
    }
  }

  absl::Status ExecuteConv1dGemm(KernelContext& ctx, const Geometry& g, const Tensor& x,
                                 const Tensor& w, const Tensor* b, Tensor* y) const {
    const int64_t rows = g.n * g.c * g.kd[0], out = g.od[0];
    // Across images, the product [M, N * T_out] follows the columns.
    const bool across = WeightRowsAcrossImages(ctx, g);
    const int64_t product = across ? g.m * g.n * out : 0;
    DYNVM_ASSIGN_OR_RETURN(
        void* ws, ctx.Workspace(static_cast<size_t>(rows * out + product) * sizeof(float) + 64));
    float* cols = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    const float* px = x.data<float>();
    // The columns' rows split over the pool (a copy: 16K floats a task at least).
    ctx.ParallelFor(rows, std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(out, 1)),
                    [&](int64_t r0, int64_t r1) { Conv1dColumns(g, px, cols, r0, r1, across); });
    if (across) return Conv1dGemmAcrossImages(ctx, g, cols, w, b, y);
    // The GEMM of a pointwise Conv1d over the columns: C * K channels, T_out steps.
    Geometry gc = g;
    gc.c = g.c * g.kd[0];
    gc.in[0] = out;
    return ExecutePointwise1d(ctx, gc, cols, w, b, y);
  }

  // Y [M, N * T_out] = W [M, C * K] X' [C * K, N * T_out] (`cols`, the product after them in the
  // workspace) on chunks of output channels claimed by the VM's threads, each chunk's rows then
  // given the bias and activation and copied to every image's output (plain or channels-last).
  absl::Status Conv1dGemmAcrossImages(KernelContext& ctx, const Geometry& g, float* cols,
                                      const Tensor& w, const Tensor* b, Tensor* y) const {
    const int64_t ck = g.c * g.kd[0], t = g.od[0], nt = g.n * t;
    float* product = cols + ck * nt;
    const float* pw = w.data<float>();
    const float* pb = b != nullptr ? b->data<float>() : nullptr;
    const cpu::Activation act = *RowActivation();
    float* py = y->data<float>();
    const int64_t chunk = std::max<int64_t>(16, ConvChunk(ctx, g.m, g.m * ck * nt));
    std::atomic<int> failed{dnnl_success};
    ctx.ParallelForDynamic(g.m, chunk, [&](int, int64_t r0, int64_t r1) {
      SetThreads(1);
      const dnnl_status_t s = dnnl_sgemm('N', 'N', r1 - r0, nt, ck, 1.0f, pw + r0 * ck, ck, cols,
                                         nt, 0.0f, product + r0 * nt, nt);
      if (s != dnnl_success) {
        failed.store(s, std::memory_order_relaxed);
        return;
      }
      for (int64_t r = r0; r < r1; ++r) {
        float* src = product + r * nt;
        if (pb != nullptr) {
          for (int64_t i = 0; i < nt; ++i) src[i] += pb[r];
        }
        if (act != cpu::Activation::kNone) cpu::BiasActivationRows(act, 1, nt, nullptr, src, nt);
        for (int64_t n = 0; n < g.n; ++n) {
          if (!blocked_.out) {
            std::memcpy(py + (n * g.m + r) * t, src + n * t, static_cast<size_t>(t) * 4);
          } else {  // channels-last Y [N, T_out, M]
            for (int64_t i = 0; i < t; ++i) py[(n * t + i) * g.m + r] = src[n * t + i];
          }
        }
      }
    });
    return FromDnnl(static_cast<dnnl_status_t>(failed.load()), "dnnl_sgemm");
  }

  // ---- A ConvTranspose without overlapping windows ----

  // Kernel equal to the stride on every axis, unpadded, undilated, ungrouped, no output padding
  // (each output is in * stride): the 2x2 stride-2 upsampling of U-Nets, FPNs and DBNet heads.
  // Macs per kernel element are tiny (kd * kd / st / st = 1 input pixel per output), so
  // oneDNN 2.6's deconvolution (a backward-data convolution, the reference kernel for one output
  // channel) runs them far below GEMM speed.
  static bool DeconvAsGemm(const Geometry& g) {
    if (g.g != 1) return false;
    for (int i = 0; i < g.k; ++i) {
      if (g.kd[i] != g.st[i] || g.dl[i] != 0 || g.pl[i] != 0 || g.od[i] != g.in[i] * g.st[i]) {
        return false;
      }
    }
    return true;
  }

  // Per image: T [M * K, P] = W^T [M * K, C] x X [C, P] (K kernel elements, P input pixels; W is
  // [C, M, K...] row-major), one sgemm; then row (m, a, b, e) of T lands on output pixels
  // (i * st + a, j * st + b, ...) of channel m, plus the bias, rows split across the VM's pool.
  absl::Status ExecuteDeconvGemm(KernelContext& ctx, const Geometry& g, const Tensor& x,
                                 const Tensor& w, const Tensor* b, Tensor* y) const {
    int64_t in[3] = {1, 1, 1}, st[3] = {1, 1, 1};
    for (int i = 0; i < g.k; ++i) {
      in[3 - g.k + i] = g.in[i];
      st[3 - g.k + i] = g.st[i];
    }
    const int64_t kk = st[0] * st[1] * st[2], p = in[0] * in[1] * in[2], rows = g.m * kk;
    const int64_t o1 = in[1] * st[1], o2 = in[2] * st[2], per_channel = in[0] * st[0] * o1 * o2;
    DYNVM_ASSIGN_OR_RETURN(void* ws,
                           ctx.Workspace(static_cast<size_t>(rows * p) * sizeof(float) + 64));
    float* t = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    const float* pw = w.data<float>();
    const float* pb = b != nullptr ? b->data<float>() : nullptr;
    for (int64_t n = 0; n < g.n; ++n) {
      DYNVM_RETURN_IF_ERROR(FromDnnl(dnnl_sgemm('T', 'N', rows, p, g.c, 1.0f, pw, rows,
                                                x.data<float>() + n * g.c * p, p, 0.0f, t, p),
                                     "dnnl_sgemm"));
      float* yn = y->data<float>() + n * g.m * per_channel;
      auto scatter = [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {  // r = ((m * st0 + a) * st1 + c) * st2 + e
          const int64_t e = r % st[2], c = (r / st[2]) % st[1], a = (r / (st[2] * st[1])) % st[0];
          const int64_t m = r / kk;
          const float bias = pb != nullptr ? pb[m] : 0.0f;
          const float* tr = t + r * p;
          float* ym = yn + m * per_channel;
          for (int64_t i0 = 0; i0 < in[0]; ++i0) {
            for (int64_t i1 = 0; i1 < in[1]; ++i1) {
              float* yr = ym + ((i0 * st[0] + a) * o1 + i1 * st[1] + c) * o2 + e;
              const float* row = tr + (i0 * in[1] + i1) * in[2];
              for (int64_t i2 = 0; i2 < in[2]; ++i2) yr[i2 * st[2]] = row[i2] + bias;
            }
          }
        }
      };
      if (ctx.num_threads() > 1 && rows * p >= kMinParallelWork / 16) {
        ctx.ParallelFor(rows, 1, scatter);
      } else {
        scatter(0, rows);
      }
    }
    return absl::OkStatus();
  }

  // ---- A 1x1 conv + 3x3 depthwise pair (a FusedConv with a depthwise stage) ----

  // Whether x, w, b and the depthwise weights are a pair this kernel runs on oneDNN: a 2D 1x1
  // stride-1 unpadded ungrouped conv with constant weights and no residual, dense f32 biases.
  // Fills the geometry of both convs.
  bool PairGeometry(Inputs in, Geometry* g, Geometry* g2) const {
    const Tensor& x = *in[0];
    const Tensor& w = *in[1];
    const Tensor* b = in.size() > 2 ? in[2] : nullptr;
    const Tensor* sum = in.size() > 3 ? in[3] : nullptr;
    const Tensor* w2 = in.size() > 4 ? in[4] : nullptr;
    const Tensor* b2 = in.size() > 5 ? in[5] : nullptr;
    if (sum != nullptr || w2 == nullptr || b2 == nullptr || !constant_weights_ ||
        x.dtype() != DType::kF32 || w.dtype() != DType::kF32 || x.numel() == 0 || w.numel() == 0 ||
        (blocked_.in && !x.is_contiguous()) || !ConvGeometry(attrs_, x, w, false, g) || g->k != 2 ||
        g->g != 1) {
      return false;
    }
    for (int i = 0; i < 2; ++i) {
      if (g->kd[i] != 1 || g->st[i] != 1 || g->dl[i] != 0 || g->pl[i] != 0 || g->pr[i] != 0) {
        return false;
      }
    }
    auto dense_bias = [&](const Tensor* t) {
      return t->dtype() == DType::kF32 && t->rank() == 1 && t->dim(0) == g->m && t->stride(0) == 1;
    };
    if ((b != nullptr && !dense_bias(b)) || !dense_bias(b2) || w2->dtype() != DType::kF32 ||
        w2->rank() != 4 || w2->dim(0) != g->m || w2->dim(1) != 1 || w2->dim(2) != 3 ||
        w2->dim(3) != 3 || (dw_.stride != 1 && dw_.stride != 2)) {
      return false;
    }
    *g2 = Geometry();
    g2->k = 2;
    g2->n = g->n;
    g2->c = g2->m = g2->g = g->m;
    for (int i = 0; i < 2; ++i) {
      g2->in[i] = g->od[i];
      g2->kd[i] = 3;
      g2->st[i] = dw_.stride;
      g2->dl[i] = 0;
      g2->pl[i] = 1;
      g2->od[i] = (g2->in[i] - 1) / dw_.stride + 1;
      g2->pr[i] = (g2->od[i] - 1) * dw_.stride + 3 - g2->in[i] - 1;
    }
    return true;
  }

  absl::Status RunPair(KernelContext& ctx, Inputs in, Outputs out) const {
    Geometry g, g2;
    if (!PairGeometry(in, &g, &g2)) return RunFallback(ctx, in, out);
    const Tensor& x = *in[0];
    const Tensor* b = in.size() > 2 ? in[2] : nullptr;
    SetThreads(ThreadsFor(ctx.num_threads(), g.n * g.m * g.c * g.od[0] * g.od[1]));
    ShapeKey key;
    key.Add(&x);
    key.Add(in[1]);
    key.Add(b != nullptr);
    key.Add(ctx.num_threads());
    SiteCache* st = SiteState<SiteCache>(ctx);
    bool fresh = false;
    Entry* e = st->Lookup(key, &fresh);
    if (fresh) {
      DYNVM_RETURN_IF_ERROR(BindEntry(e, "convolution", [&](const dnnl::engine& engine) {
        BindPair(engine, g, g2, x, *in[1], *in[4], b != nullptr, e);
      }));
    }
    if (e->use_fallback) return RunFallback(ctx, in, out);
    DYNVM_RETURN_IF_ERROR(
        reference::PrepareOutput(ctx, out[0], DType::kF32, OutDims(g2), "FusedConv"));
    return ExecutePair(ctx, *e, in, out[0]);
  }

  // oneDNN's depthwise post-op (append_dw_k3s1p1 / k3s2p1) on its 1x1 convolution where both
  // ends are channels-last, the expanded tensor has at least kFusedDwMinElements elements and
  // oneDNN gives an optimized implementation for the pair (for small images it gives
  // "ref_fused_convolution", two primitives of its own: those run as our two primitives); else
  // two primitives, the 1x1 conv writing the expanded tensor (NHWC) into a buffer that every
  // pair on the thread shares (SharedMid: kept in cache from pair to pair, like the memory
  // plan's buffers; a buffer per site or a block of the VM's pool per size ran the batch-1
  // 112x112 pair 1.6x slower than two FusedConv nodes) and the depthwise conv reading it. The fused
  // primitive takes oneDNN's own (blocked) layouts, with the input and output reordered: on
  // channels-last (nhwc) source and destination oneDNN 2.6's fused AVX2 kernel computes wrong
  // values (all but the first few channels), and without a bias on the 1x1 conv it crashes (a zero
  // bias is given). REQUIRES: inside Guard.
  void BindPair(const dnnl::engine& engine, const Geometry& g, const Geometry& g2, const Tensor& x,
                const Tensor& w, const Tensor& w2, bool bias, Entry* e) const {
    const dnnl::memory::desc src = blocked_.in ? BlockedDesc(x.dims()) : TensorDesc(x);
    const Dims mid_dims = OutDims(g), out_dims = OutDims(g2);
    const dnnl::memory::desc mid = BlockedDesc(mid_dims);
    const dnnl::memory::desc dst =
        blocked_.out ? BlockedDesc(out_dims) : DenseDesc(dt::f32, out_dims);
    const dnnl::memory::desc wts = WeightsDesc(g, w, false), wts2 = WeightsDesc(g2, w2, false);
    const dnnl::memory::desc bias_md = DenseDesc(dt::f32, {g.m}), no_bias;
    // With the post-op the 1x1 conv always has a bias (zeros when it has none): oneDNN 2.6's
    // fused kernel crashes without one.
    const dnnl::convolution_forward::desc d1_any(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, AnyDesc(x.dims()),
        AnyDesc(wts.dims()), bias_md, AnyDesc(mid_dims), {1, 1}, {0, 0}, {0, 0}, {0, 0});
    const int dw = DNNL_ARG_ATTR_POST_OP_DW;
    dnnl::memory::desc pwts, pwts2;
    if (blocked_.in && blocked_.out && g.n * g.m * g.od[0] * g.od[1] >= FusedDwMinElements()) {
      try {
        dnnl::primitive_attr attr = UserScratchpadAttr();
        dnnl::post_ops ops;
        if (act_.present) ops.append_eltwise(1.0f, act_.alg, act_.alpha, act_.beta);
        if (dw_.stride == 1) {
          ops.append_dw_k3s1p1(dt::f32, dt::f32, dt::f32, 0, {});
        } else {
          ops.append_dw_k3s2p1(dt::f32, dt::f32, dt::f32, 0, {});
        }
        if (dw_.act.present) {
          ops.append_eltwise(1.0f, dw_.act.alg, dw_.act.alpha, dw_.act.beta);
        }
        attr.set_post_ops(ops);
        const dnnl::convolution_forward::primitive_desc pd(d1_any, attr, engine);
        const dnnl::memory::desc dwb = pd.query_md(dnnl::query::exec_arg_md, dw | DNNL_ARG_BIAS);
        const dnnl::memory::desc psrc = pd.src_desc(), pdst = pd.dst_desc();
        if (!IsReferenceImpl(pd) && dwb == bias_md) {
          pwts = pd.weights_desc();
          pwts2 = pd.query_md(dnnl::query::exec_arg_md, dw | DNNL_ARG_WEIGHTS);
          e->main.Bind(pd, {{DNNL_ARG_SRC, psrc},
                            {DNNL_ARG_WEIGHTS, pwts},
                            {DNNL_ARG_BIAS, bias_md},
                            {DNNL_ARG_DST, pdst},
                            {dw | DNNL_ARG_WEIGHTS, pwts2},
                            {dw | DNNL_ARG_BIAS, bias_md}});
          if (!bias) e->zero_bias.assign(static_cast<size_t>(g.m), 0.0f);
          if (psrc != src) {
            BindReorder(&e->src_reorder, engine, src, psrc);
            e->src_bytes = Align(psrc.get_size());
          }
          if (pdst != dst) {
            BindReorder(&e->dst_reorder, engine, pdst, dst);
            e->dst_bytes = Align(pdst.get_size());
          }
          e->dw_fused = true;
        }
      } catch (const dnnl::error&) {
        // No fused implementation: two primitives.
      }
    }
    if (!e->dw_fused) {
      // Both primitives on channels-last tensors (AVX2's kernels take channels-last on both sides
      // only: a plain end is reordered, as the plain FusedConv does).
      const dnnl::memory::desc src_cl = BlockedDesc(x.dims()), dst_cl = BlockedDesc(out_dims);
      const dnnl::convolution_forward::desc d1_cl(
          dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_cl,
          AnyDesc(wts.dims()), bias ? bias_md : no_bias, mid, {1, 1}, {0, 0}, {0, 0}, {0, 0});
      const dnnl::convolution_forward::primitive_desc p1(d1_cl, EltwiseAttr(act_), engine);
      const dnnl::convolution_forward::desc d2(
          dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, mid,
          AnyDesc(wts2.dims()), bias_md, dst_cl, {g2.st[0], g2.st[1]}, {0, 0}, {1, 1},
          {g2.pr[0], g2.pr[1]});
      const dnnl::convolution_forward::primitive_desc p2(d2, EltwiseAttr(dw_.act), engine);
      if (p1.src_desc() != src_cl || p1.dst_desc() != mid || p2.dst_desc() != dst_cl) {
        throw dnnl::error(dnnl_unimplemented, "1x1 + depthwise convolution");
      }
      e->reference_impl = IsReferenceImpl(p1) || IsReferenceImpl(p2);
      pwts = p1.weights_desc();
      pwts2 = p2.weights_desc();
      if (bias) {
        e->main.Bind(p1, {{DNNL_ARG_SRC, src_cl},
                          {DNNL_ARG_WEIGHTS, pwts},
                          {DNNL_ARG_BIAS, bias_md},
                          {DNNL_ARG_DST, mid}});
      } else {
        e->main.Bind(p1, {{DNNL_ARG_SRC, src_cl}, {DNNL_ARG_WEIGHTS, pwts}, {DNNL_ARG_DST, mid}});
      }
      e->second.Bind(p2, {{DNNL_ARG_SRC, mid},
                          {DNNL_ARG_WEIGHTS, pwts2},
                          {DNNL_ARG_BIAS, bias_md},
                          {DNNL_ARG_DST, dst_cl}});
      if (src != src_cl) {
        BindReorder(&e->src_reorder, engine, src, src_cl);
        e->src_bytes = Align(src_cl.get_size());
      }
      if (dst != dst_cl) {
        BindReorder(&e->dst_reorder, engine, dst_cl, dst);
        e->dst_bytes = Align(dst_cl.get_size());
      }
    }
    BindReorder(&e->w_reorder, engine, wts, pwts);
    e->w_packed = pwts;
    e->w_bytes = Align(pwts.get_size());
    BindReorder(&e->dw_reorder, engine, wts2, pwts2);
    e->dw_packed = pwts2;
    e->dw_bytes = Align(pwts2.get_size());
  }

  // Both weights packed once (shared like other packed weights; per run into the workspace
  // when the kernel's cache is full), then one primitive or two.
  absl::Status ExecutePair(KernelContext& ctx, const Entry& e, Inputs in, Tensor* y) const {
    const Tensor& w = *in[1];
    const Tensor& w2 = *in[4];
    const Tensor* b = in.size() > 2 ? in[2] : nullptr;
    DYNVM_ASSIGN_OR_RETURN(const void* pw, packed_.Get(w.raw_data(), e.w_packed, e.w_reorder));
    DYNVM_ASSIGN_OR_RETURN(const void* pw2, packed_.Get(w2.raw_data(), e.dw_packed, e.dw_reorder));
    size_t scratch = 0;
    for (const BoundPrimitive* r : {&e.main, &e.second, &e.w_reorder, &e.dw_reorder}) {
      scratch = std::max(scratch, r->scratchpad_bytes());
    }
    scratch = Align(scratch);
    const size_t w_bytes = pw == nullptr ? e.w_bytes : 0,
                 w2_bytes = pw2 == nullptr ? e.dw_bytes : 0;
    for (const BoundPrimitive* r : {&e.src_reorder, &e.dst_reorder}) {
      scratch = std::max(scratch, Align(r->scratchpad_bytes()));
    }
    // The expanded tensor of two primitives: up to kFusedDwMinElements in one buffer per thread
    // that every pair site shares (kept in cache from pair to pair, as the memory plan keeps
    // separate convs' values); a bigger one (a pair oneDNN would not fuse) in the site's
    // workspace, within the VM's memory accounting.
    const Tensor& x = *in[0];
    const size_t mid_floats = static_cast<size_t>(x.dim(0) * w.dim(0) * x.dim(2) * x.dim(3));
    const bool mid_shared = mid_floats <= static_cast<size_t>(kFusedDwMinElements);
    const size_t mid_bytes = e.dw_fused || mid_shared ? 0 : Align(mid_floats * sizeof(float));
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(scratch + e.src_bytes + e.dst_bytes + w_bytes +
                                                   w2_bytes + mid_bytes + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    char* pscratch = base;
    char* psrc = base + scratch;
    char* pdst = psrc + e.src_bytes;
    char* pws = pdst + e.dst_bytes;
    if (pw == nullptr) {  // the kernel's packed-weights cache is full: pack per run
      DYNVM_RETURN_IF_ERROR(e.w_reorder.Execute({w.raw_data(), pws}, pscratch));
      pw = pws;
    }
    if (pw2 == nullptr) {
      DYNVM_RETURN_IF_ERROR(e.dw_reorder.Execute({w2.raw_data(), pws + w_bytes}, pscratch));
      pw2 = pws + w_bytes;
    }
    const void* src = in[0]->raw_data();
    const void* b2 = in[5]->raw_data();
    void* dst = y->raw_data();
    if (e.dw_fused) {
      if (e.src_reorder.bound()) {
        DYNVM_RETURN_IF_ERROR(e.src_reorder.Execute({src, psrc}, pscratch));
        src = psrc;
      }
      void* fused_dst = e.dst_reorder.bound() ? pdst : dst;
      const void* pb = b != nullptr ? b->raw_data() : e.zero_bias.data();
      DYNVM_RETURN_IF_ERROR(e.main.Execute({src, pw, pb, fused_dst, pw2, b2}, pscratch));
      if (e.dst_reorder.bound()) return e.dst_reorder.Execute({pdst, dst}, pscratch);
      return absl::OkStatus();
    }
    void* pmid = mid_shared ? SharedMid(mid_floats) : pws + w_bytes + w2_bytes;
    if (pmid == nullptr) return absl::ResourceExhaustedError("FusedConv: expanded tensor");
    if (e.src_reorder.bound()) {
      DYNVM_RETURN_IF_ERROR(e.src_reorder.Execute({src, psrc}, pscratch));
      src = psrc;
    }
    if (b != nullptr) {
      DYNVM_RETURN_IF_ERROR(e.main.Execute({src, pw, b->raw_data(), pmid}, pscratch));
    } else {
      DYNVM_RETURN_IF_ERROR(e.main.Execute({src, pw, pmid}, pscratch));
    }
    DYNVM_RETURN_IF_ERROR(
        e.second.Execute({pmid, pw2, b2, e.dst_reorder.bound() ? pdst : dst}, pscratch));
    if (e.dst_reorder.bound()) return e.dst_reorder.Execute({pdst, dst}, pscratch);
    return absl::OkStatus();
  }

  // The sum and eltwise post-ops, user scratchpad.
  dnnl::primitive_attr PostOpsAttr(bool sum) const {
    dnnl::primitive_attr attr = UserScratchpadAttr();
    dnnl::post_ops ops;
    if (sum) ops.append_sum(1.0f);
    if (act_.present) ops.append_eltwise(1.0f, act_.alg, act_.alpha, act_.beta);
    if (act2_.present) ops.append_eltwise(1.0f, act2_.alg, act2_.alpha, act2_.beta);
    attr.set_post_ops(ops);
    return attr;
  }

  // `y_strides`: a plain destination's strides where it is a view into a larger output (a
  // block of rows); null: dense.
  void Bind(const dnnl::engine& engine, const Geometry& g, const Tensor& x, const Tensor& w,
            bool bias, const Tensor* sum, const Dims& out_dims, Entry* e,
            const Dims* y_strides = nullptr) const {
    // A dense one-channel input has the same bytes plain and channels-last: described
    // channels-last, it pairs with a channels-last destination in oneDNN's optimized kernels
    // (on AVX2 a plain source with a channels-last destination is its reference convolution;
    // the plain description would need a blocked destination and a reorder of the output).
    const bool one_channel = !transpose_ && g.c == 1 && x.is_contiguous();
    const dnnl::memory::desc src =
        blocked_.in || one_channel ? BlockedDesc(x.dims()) : TensorDesc(x);
    const dnnl::memory::desc wts = WeightsDesc(g, w, transpose_);
    const dnnl::memory::desc dst = blocked_.out           ? BlockedDesc(out_dims)
                                   : y_strides != nullptr ? PlainDesc(dt::f32, out_dims, *y_strides)
                                                          : DenseDesc(dt::f32, out_dims);
    const dnnl::memory::desc bias_md = DenseDesc(dt::f32, {g.m});
    const dnnl::memory::dims strides(g.st, g.st + g.k), dil(g.dl, g.dl + g.k), pl(g.pl, g.pl + g.k),
        pr(g.pr, g.pr + g.k);
    // Channels-last operands (between FusedConvs) are given as is: oneDNN picks an
    // implementation that reads or writes them directly; the others are its choice.
    const dnnl::memory::desc src_any = blocked_.in || one_channel ? src : AnyDesc(x.dims());
    const dnnl::memory::desc dst_any = blocked_.out ? dst : AnyDesc(out_dims);
    const dnnl::memory::desc wts_any = AnyDesc(wts.dims());
    const dnnl::primitive_attr attr = PostOpsAttr(sum != nullptr);
    const dnnl::memory::desc no_bias;
    dnnl::primitive_desc pd;
    if (!transpose_ && constant_weights_ && UseWinograd(g)) {
      // oneDNN's Winograd takes its own blocked layouts: source and destination are its choice
      // (reordered from and to the tensors' layouts, as for any other choice). Only for
      // constant weights: their transform into its layout is costly and then done once.
      try {
        dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                          dnnl::algorithm::convolution_winograd, AnyDesc(x.dims()),
                                          wts_any, bias ? bias_md : no_bias, AnyDesc(out_dims),
                                          strides, dil, pl, pr);
        pd = dnnl::convolution_forward::primitive_desc(d, attr, engine);
        e->winograd = true;
      } catch (const dnnl::error&) {
        pd = dnnl::primitive_desc();  // no Winograd for this case: the direct algorithm
      }
    }
    // The direct algorithm, on the first source/destination layout pair for which oneDNN has an
    // optimized implementation: the tensors' own layouts first (no reorder), then the
    // destination in the source's layout (a channels-last source with a plain output: AVX2's
    // kernels take channels-last only on both sides), then oneDNN's choice for both (a
    // one-channel input on AVX2: plain source, blocked destination). oneDNN's reference
    // implementation ("ref:any", 10-100x slower) is kept only when every pair gets it.
    auto direct = [&](const dnnl::memory::desc& s, const dnnl::memory::desc& d) {
      if (transpose_) {
        dnnl::deconvolution_forward::desc dd(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::deconvolution_direct, s, wts_any,
                                             bias ? bias_md : no_bias, d, strides, dil, pl, pr);
        return dnnl::primitive_desc(dnnl::deconvolution_forward::primitive_desc(dd, attr, engine));
      }
      dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference,
                                         dnnl::algorithm::convolution_direct, s, wts_any,
                                         bias ? bias_md : no_bias, d, strides, dil, pl, pr);
      return dnnl::primitive_desc(dnnl::convolution_forward::primitive_desc(cd, attr, engine));
    };
    if (!pd) {
      // A plain source with a channels-last destination (a CNN's first conv: 3 channels in, 32
      // out): the source reordered into channels-last where it is no bigger than the output, so
      // that the smaller tensor is the one reordered (AVX2's kernels take channels-last only on
      // both sides; oneDNN's own choice is a blocked destination reordered after).
      const bool reorder_src = !transpose_ && blocked_.out && !blocked_.in && !one_channel &&
                               x.numel() <= g.n * g.m * OutPixels(g);
      const std::pair<dnnl::memory::desc, dnnl::memory::desc> layouts[] = {
          {src_any, dst_any},
          {src_any, blocked_.in ? BlockedDesc(out_dims) : dst_any},
          {reorder_src ? BlockedDesc(x.dims()) : src_any, dst_any},
          {AnyDesc(x.dims()), AnyDesc(out_dims)}};
      for (const auto& [s, d] : layouts) {
        try {
          dnnl::primitive_desc candidate = direct(s, d);
          const bool ref = IsReferenceImpl(candidate);
          if (!pd || (!ref && e->reference_impl)) {
            pd = candidate;
            e->reference_impl = ref;
          }
        } catch (const dnnl::error&) {
          // No implementation for this pair: the next one.
        }
        if (pd && !e->reference_impl) break;
      }
      if (!pd) throw dnnl::error(dnnl_unimplemented, "convolution");
    }
    const dnnl::memory::desc psrc = pd.query_md(dnnl::query::src_md);
    const dnnl::memory::desc pwts = pd.query_md(dnnl::query::weights_md);
    const dnnl::memory::desc pdst = pd.query_md(dnnl::query::dst_md);
    if (bias) {
      e->main.Bind(pd, {{DNNL_ARG_SRC, psrc},
                        {DNNL_ARG_WEIGHTS, pwts},
                        {DNNL_ARG_BIAS, bias_md},
                        {DNNL_ARG_DST, pdst}});
    } else {
      e->main.Bind(pd, {{DNNL_ARG_SRC, psrc}, {DNNL_ARG_WEIGHTS, pwts}, {DNNL_ARG_DST, pdst}});
    }
    if (psrc != src) {
      BindReorder(&e->src_reorder, engine, src, psrc);
      e->src_bytes = Align(psrc.get_size());
    }
    if (pwts != wts) {
      BindReorder(&e->w_reorder, engine, wts, pwts);
      e->w_packed = pwts;
      e->w_bytes = Align(pwts.get_size());
    }
    if (pdst != dst) {
      BindReorder(&e->dst_reorder, engine, pdst, dst);
      e->dst_bytes = Align(pdst.get_size());
    }
    if (sum != nullptr) {
      BindReorder(&e->sum_reorder, engine,
                  blocked_.sum ? BlockedDesc(sum->dims()) : TensorDesc(*sum), pdst);
    }
  }

  // oneDNN's Winograd (F(4x4, 3x3) or F(2x2, 3x3); AVX-512 only, elsewhere oneDNN has none and
  // the direct algorithm runs) for a 2D 3x3 stride-1 undilated ungrouped convolution with at
  // least kWinogradMinChannels input and kWinogradMinOutChannels output channels and
  // kWinogradMinPixels output pixels per image: 2.25-4x fewer multiply-adds, for 4x bigger
  // (transformed) weights, a transform per tile and reorders into and out of its blocked layout. It
  // gains where the direct convolution is bound by its multiply-adds over enough tiles; below that
  // (small images, few channels), by reading its weights or by the reorders, it loses.
  static bool UseWinograd(const Geometry& g) {
    if (g.k != 2 || g.g != 1 || g.c < kWinogradMinChannels || g.m < kWinogradMinOutChannels) {
      return false;
    }
    for (int i = 0; i < 2; ++i) {
      if (g.kd[i] != 3 || g.st[i] != 1 || g.dl[i] != 0) return false;
    }
    return g.od[0] * g.od[1] >= kWinogradMinPixels;
  }

  // The FusedConvs dynvm's own Winograd F(2x2, 3x3) (kernels/cpu/winograd.h) can serve: constant
  // weights between channels-last values (input, output and residual), 2D, 3x3, stride 1,
  // undilated, ungrouped, with at least kOwnWinogradMinChannels input and output channels and
  // kOwnWinogradMinTiles output tiles over the batch, at a microkernel level with AVX2. Any pads,
  // sizes, batch and post-op. It runs where choice::UseOwnWinograd says, given whether oneDNN has
  // a Winograd for it (OneDnnHasWinograd, decided at bind time).
  bool OwnWinogradTakes(const Geometry& g, const Tensor* sum) const {
    if (transpose_ || !constant_weights_ || g.k != 2 || g.g != 1 || !blocked_.in || !blocked_.out ||
        (sum != nullptr && !blocked_.sum) || cpu::ActiveIsa() < cpu::Isa::kAvx2 || act2_.present ||
        (act_.present && act_.alg == dnnl::algorithm::eltwise_linear)) {
      return false;  // its post-ops are one activation of OwnWinogradPostOps's
    }
    for (int i = 0; i < 2; ++i) {
      if (g.kd[i] != 3 || g.st[i] != 1 || g.dl[i] != 0) return false;
    }
    const int64_t tiles = g.n * ((g.od[0] + 1) / 2) * ((g.od[1] + 1) / 2);
    return g.c >= kOwnWinogradMinChannels && g.m >= kOwnWinogradMinChannels &&
           tiles >= kOwnWinogradMinTiles;
  }

  // Whether oneDNN has a Winograd primitive for the convolution (with its post-ops), whatever
  // UseWinograd says. REQUIRES: inside Guard.
  bool OneDnnHasWinograd(const dnnl::engine& engine, const Geometry& g, const Tensor& x, bool bias,
                         const Tensor* sum) const {
    const Dims out_dims = OutDims(g);
    const Dims wdims = {g.m, g.c, 3, 3};
    const dnnl::memory::dims strides = {1, 1}, dil = {0, 0}, pl(g.pl, g.pl + 2), pr(g.pr, g.pr + 2);
    try {
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_winograd, AnyDesc(x.dims()),
                                        AnyDesc(wdims),
                                        bias ? DenseDesc(dt::f32, {g.m}) : dnnl::memory::desc(),
                                        AnyDesc(out_dims), strides, dil, pl, pr);
      dnnl::convolution_forward::primitive_desc pd(d, PostOpsAttr(sum != nullptr), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }

  cpu::winograd::PostOps OwnWinogradPostOps(const Tensor* b, const Tensor* sum) const {
    cpu::winograd::PostOps post;
    post.bias = b != nullptr ? b->data<float>() : nullptr;
    post.sum = sum != nullptr ? sum->data<float>() : nullptr;
    if (!act_.present) return post;
    post.alpha = act_.alpha;
    post.beta = act_.beta;
    using alg = dnnl::algorithm;
    using A = cpu::winograd::Act;
    switch (act_.alg) {
      case alg::eltwise_relu:
        post.act = act_.alpha == 0.0f ? A::kRelu : A::kLeakyRelu;
        break;
      case alg::eltwise_clip_v2:
        post.act = A::kClip;
        break;
      case alg::eltwise_logistic:
        post.act = A::kSigmoid;
        break;
      case alg::eltwise_hardswish:
        post.act = A::kHardSwish;
        break;
      case alg::eltwise_swish:
        post.act = A::kSiLU;
        break;
      default:
        post.act = A::kTanh;  // the last one left (OwnWinogradTakes refuses Affine)
        break;
    }
    return post;
  }

  // Transforms the weights once (shared like other packed weights), then splits the tile blocks
  // over the VM's pool, each task with its own part of the workspace.
  absl::Status ExecuteOwnWinograd(KernelContext& ctx, const Geometry& g, const Tensor& x,
                                  const Tensor& w, const Tensor* b, const Tensor* sum,
                                  Tensor* y) const {
    cpu::winograd::Shape s{g.n, g.c, g.m, g.in[0], g.in[1], g.pl[0], g.pl[1], g.od[0], g.od[1]};
    s.threads = ThreadsFor(ctx.num_threads(), 16 * cpu::winograd::Tiles(s) * g.c * g.m);
    const int64_t blocks = cpu::winograd::Blocks(s);
    const int tasks = s.threads > 1 ? ctx.ParallelTasks(blocks, 1) : 1;
    const int64_t strides[4] = {w.stride(0), w.stride(1), w.stride(2), w.stride(3)};
    const float* pw = w.data<float>();
    auto pack = [&](void* to) {
      cpu::winograd::PackWeights(pw, strides, g.c, g.m, static_cast<float*>(to));
      return absl::OkStatus();
    };
    const size_t w_floats = static_cast<size_t>(cpu::winograd::PackedWeightsFloats(g.c, g.m));
    // Tells this packing apart from the other layouts of the same weights in the cache.
    const dnnl::memory::desc tag({16, g.c, g.m}, dt::f32, dnnl::memory::format_tag::abc);
    DYNVM_ASSIGN_OR_RETURN(const void* packed,
                           packed_.Get(w.raw_data(), tag, w_floats * sizeof(float), pack));
    const size_t per_task =
        Align(static_cast<size_t>(cpu::winograd::WorkspaceFloats(s)) * sizeof(float));
    const size_t w_bytes = packed == nullptr ? Align(w_floats * sizeof(float)) : 0;
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(per_task * tasks + w_bytes + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    if (packed == nullptr) {  // the kernel's packed-weights cache is full: pack per run
      DYNVM_RETURN_IF_ERROR(pack(base + per_task * tasks));
      packed = base + per_task * tasks;
    }
    const cpu::winograd::PostOps post = OwnWinogradPostOps(b, sum);
    const float* px = x.data<float>();
    const float* pu = static_cast<const float*>(packed);
    float* py = y->data<float>();
    ctx.ParallelFor(tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        cpu::winograd::RunBlocks(s, px, pu, post, py, blocks * t / tasks, blocks * (t + 1) / tasks,
                                 reinterpret_cast<float*>(base + per_task * t));
      }
    });
    return absl::OkStatus();
  }

  // A 2D FusedConv over a channels-last chain whose output has at most kGemmMaxPixels pixels
  // per image (the last stages of a CNN: 2x2 to 4x4) and at least kGemmMinRows over the batch,
  // with constant weights, runs as one GEMM over the batch: rows = output pixels of every image
  // (im2col of the NHWC input, zeros in the padding), columns = output channels, inner = KH * KW *
  // C, into the NHWC output, then bias and activation in one pass (the residual is C's initial
  // value, beta = 1). oneDNN's direct convolution runs such shapes far below its peak (an M of 4 to
  // 16 pixels per image); one sgemm with M = N * OH * OW reads the weights once at GEMM speed.
  bool UseGemm(const Geometry& g, const Tensor* sum) const {
    if (transpose_ || !constant_weights_ || g.k != 2 || g.g != 1 || !blocked_.in || !blocked_.out ||
        (sum != nullptr && !blocked_.sum)) {
      return false;
    }
    if ((act_.present && act_.alg != dnnl::algorithm::eltwise_relu &&
         act_.alg != dnnl::algorithm::eltwise_clip_v2) ||
        act2_.present) {
      return false;
    }
    const int64_t rows = g.n * g.od[0] * g.od[1], inner = g.kd[0] * g.kd[1] * g.c;
    return g.od[0] * g.od[1] <= kGemmMaxPixels && rows >= kGemmMinRows && inner > g.c &&
           rows * inner <= kGemmMaxColumnFloats;
  }

  // Binds the weights' reorder into [KH, KW, C, M] (row-major [KH * KW * C, M]).
  void BindGemm(const dnnl::engine& engine, const Geometry& g, const Tensor& w, Entry* e) const {
    const dnnl::memory::desc wts = WeightsDesc(g, w, false);
    const dnnl::memory::desc packed(wts.dims(), dt::f32, dnnl::memory::format_tag::cdba);
    BindReorder(&e->w_reorder, engine, wts, packed);
    e->w_packed = packed;
    e->gemm = true;
  }

  absl::Status ExecuteGemm(KernelContext& ctx, const Entry& e, const Geometry& g, const Tensor& x,
                           const Tensor& w, const Tensor* b, const Tensor* sum, Tensor* y) const {
    DYNVM_ASSIGN_OR_RETURN(const void* packed, packed_.Get(w.raw_data(), e.w_packed, e.w_reorder));
    const int64_t c = g.c, m = g.m, ih = g.in[0], iw = g.in[1], oh = g.od[0], ow = g.od[1];
    const int64_t kh = g.kd[0], kw = g.kd[1], inner = kh * kw * c, rows = g.n * oh * ow;
    const size_t w_bytes = packed == nullptr ? Align(e.w_packed.get_size()) : 0;
    const size_t col_bytes = Align(static_cast<size_t>(rows * inner) * sizeof(float));
    DYNVM_ASSIGN_OR_RETURN(
        void* ws, ctx.Workspace(col_bytes + w_bytes + e.w_reorder.scratchpad_bytes() + 128));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    float* col = reinterpret_cast<float*>(base);
    if (packed == nullptr) {  // the kernel's packed-weights cache is full: pack per run
      char* pw = base + col_bytes;
      DYNVM_RETURN_IF_ERROR(e.w_reorder.Execute({w.raw_data(), pw}, pw + w_bytes));
      packed = pw;
    }
    const float* px = x.data<float>();
    float* row = col;
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          for (int64_t ky = 0; ky < kh; ++ky) {
            const int64_t iy = oy * g.st[0] - g.pl[0] + ky * (g.dl[0] + 1);
            for (int64_t kx = 0; kx < kw; ++kx, row += c) {
              const int64_t ix = ox * g.st[1] - g.pl[1] + kx * (g.dl[1] + 1);
              if (iy < 0 || iy >= ih || ix < 0 || ix >= iw) {
                std::memset(row, 0, static_cast<size_t>(c) * sizeof(float));
              } else {
                std::memcpy(row, px + ((n * ih + iy) * iw + ix) * c,
                            static_cast<size_t>(c) * sizeof(float));
              }
            }
          }
        }
      }
    }
    float* py = y->data<float>();
    if (sum != nullptr && sum->raw_data() != py) {
      std::memmove(py, sum->raw_data(), static_cast<size_t>(rows * m) * sizeof(float));
    }
    DYNVM_RETURN_IF_ERROR(FromDnnl(
        dnnl_sgemm('N', 'N', rows, m, inner, 1.0f, col, inner, static_cast<const float*>(packed), m,
                   sum != nullptr ? 1.0f : 0.0f, py, m),
        "dnnl_sgemm"));
    const float* pb = b != nullptr ? b->data<float>() : nullptr;
    if (pb == nullptr && !act_.present) return absl::OkStatus();
    const bool relu = act_.present && act_.alg == dnnl::algorithm::eltwise_relu;
    const bool clip = act_.present && act_.alg == dnnl::algorithm::eltwise_clip_v2;
    const float slope = act_.alpha, lo = act_.alpha, hi = act_.beta;
    for (int64_t r = 0; r < rows; ++r) {
      float* yr = py + r * m;
      for (int64_t j = 0; j < m; ++j) {
        float v = yr[j] + (pb != nullptr ? pb[j] : 0.0f);
        // As oneDNN's eltwise post-ops: a NaN leaves Relu and Clip as 0 or the bound.
        if (relu) v = v > 0.0f ? v : (slope == 0.0f ? 0.0f : (v < 0.0f ? v * slope : 0.0f));
        if (clip) v = v > lo ? (v < hi ? v : hi) : lo;
        yr[j] = v;
      }
    }
    return absl::OkStatus();
  }

  // The workspace of one primitive run (RunOnce): the largest scratchpad, then the reordered
  // source and destination.
  static size_t ScratchBytes(const Entry& e) {
    size_t scratch = e.main.scratchpad_bytes();
    for (const BoundPrimitive* r : {&e.src_reorder, &e.w_reorder, &e.dst_reorder, &e.sum_reorder}) {
      scratch = std::max(scratch, r->scratchpad_bytes());
    }
    return Align(scratch);
  }
  static size_t SlotBytes(const Entry& e) { return ScratchBytes(e) + e.src_bytes + e.dst_bytes; }

  // The weights in the primitive's layout: packed once (constant weights) or reordered into `pw`.
  absl::StatusOr<const void*> PrimitiveWeights(const Entry& e, const Tensor& w, char* pw,
                                               char* pscratch) const {
    if (e.w_reorder.bound() && constant_weights_) {
      DYNVM_ASSIGN_OR_RETURN(const void* packed,
                             packed_.Get(w.raw_data(), e.w_packed, e.w_reorder));
      if (packed != nullptr) return packed;
    }
    if (!e.w_reorder.bound()) return w.raw_data();
    DYNVM_RETURN_IF_ERROR(e.w_reorder.Execute({w.raw_data(), pw}, pscratch));
    return static_cast<const void*>(pw);
  }

  // The primitives of one run: main, src_reorder, dst_reorder, sum_reorder (an entry's own, or
  // a lane's handles on them).
  using Prims = std::array<const BoundPrimitive*, 4>;
  static Prims OwnPrims(const Entry& e) {
    return {&e.main, &e.src_reorder, &e.dst_reorder, &e.sum_reorder};
  }

  // One run of e's primitive: src, sum (or null) and y at the first element of what e was bound
  // for (the batch, or one image of it); `slot`: SlotBytes(e) bytes, 64-byte aligned.
  static absl::Status RunOnce(const Entry& e, const Prims& p, const void* src, const void* wts,
                              const void* bias, const void* sum, void* y, char* slot) {
    char* pscratch = slot;
    char* psrc = pscratch + ScratchBytes(e);
    char* pdst = psrc + e.src_bytes;
    if (p[1]->bound()) {
      DYNVM_RETURN_IF_ERROR(p[1]->Execute({src, psrc}, pscratch));
      src = psrc;
    }
    void* dst = p[2]->bound() ? static_cast<void*>(pdst) : y;
    if (sum != nullptr && sum != dst) DYNVM_RETURN_IF_ERROR(p[3]->Execute({sum, dst}, pscratch));
    if (bias != nullptr) {
      DYNVM_RETURN_IF_ERROR(p[0]->Execute({src, wts, bias, dst}, pscratch));
    } else {
      DYNVM_RETURN_IF_ERROR(p[0]->Execute({src, wts, dst}, pscratch));
    }
    if (p[2]->bound()) DYNVM_RETURN_IF_ERROR(p[2]->Execute({pdst, y}, pscratch));
    return absl::OkStatus();
  }

  absl::Status Execute(KernelContext& ctx, const Entry& e, const Tensor& x, const Tensor& w,
                       const Tensor* b, const Tensor* sum, Tensor* y) const {
    const size_t slot = SlotBytes(e);
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(slot + e.w_bytes + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    DYNVM_ASSIGN_OR_RETURN(const void* wts, PrimitiveWeights(e, w, base + slot, base));
    return RunOnce(e, OwnPrims(e), x.raw_data(), wts, b != nullptr ? b->raw_data() : nullptr,
                   sum != nullptr ? sum->raw_data() : nullptr, y->raw_data(), base);
  }

  // A batch of small images on more than one thread: the images split over the VM's pool, each
  // run by a primitive bound for one image at OpenMP count 1 (below kMinParallelWork oneDNN ran
  // the batch on one thread; above it, on an OpenMP team whose static halves wait for a
  // descheduled thread). Each range claims the next image from a shared counter, so a range
  // whose core is busy holds up its current image only. From kMinParallelGemm multiply-adds in
  // all; above kMinParallelWork only where the images divide evenly or number at least 4 per
  // range (else OpenMP's split of the whole batch is the more even one).
  static bool PerImageTakes(const KernelContext& ctx, const Geometry& g, int64_t macs,
                            const Tensor& y) {
    if (ctx.num_threads() < 2 || g.n < 2 || macs < kMinParallelGemm || !y.is_contiguous()) {
      return false;
    }
    const int tasks = ctx.ParallelTasks(g.n, 1);
    return tasks > 1 && (macs < kMinParallelWork || g.n % tasks == 0 || g.n >= 4 * tasks);
  }

  // One image of `t` (its first), as a view with the same strides.
  static absl::StatusOr<Tensor> FirstImage(const Tensor& t) {
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    dims[0] = 1;
    return Tensor::View(t.storage(), t.byte_offset(), t.dtype(), dims, t.strides());
  }

  // The site's entry bound for one image of this batch (oneDNN's direct or Winograd
  // convolution), or null where oneDNN has none for it.
  absl::StatusOr<const Entry*> ImageEntry(KernelContext& ctx, SiteCache* st, const Geometry& g,
                                          const Tensor& x, const Tensor& w, const Tensor* b,
                                          const Tensor* sum) const {
    DYNVM_ASSIGN_OR_RETURN(const Tensor x1, FirstImage(x));
    Tensor sum1;
    if (sum != nullptr) {
      DYNVM_ASSIGN_OR_RETURN(sum1, FirstImage(*sum));
    }
    ShapeKey key;
    key.Add(&x1);
    key.Add(&w);
    key.Add(b != nullptr);
    key.Add(sum != nullptr ? &sum1 : nullptr);
    key.Add(int64_t{-1});  // an image of a split batch (no thread count: it runs on one)
    bool fresh = false;
    Entry* e = st->Lookup(key, &fresh);
    if (fresh) {
      Geometry g1 = g;
      g1.n = 1;
      const Dims out1 = OutDims(g1);
      DYNVM_RETURN_IF_ERROR(BindEntry(
          e, transpose_ ? "deconvolution" : "convolution", [&](const dnnl::engine& engine) {
            e->per_image = true;
            Bind(engine, g1, x1, w, b != nullptr, sum != nullptr ? &sum1 : nullptr, out1, e);
          }));
    }
    if (e->use_fallback) return nullptr;
    for (int t = static_cast<int>(e->lanes.size()); t < ctx.ParallelTasks(g.n, 1); ++t) {
      e->lanes.push_back({e->main.Share(), e->src_reorder.Share(), e->dst_reorder.Share(),
                          e->sum_reorder.Share()});
    }
    return e;
  }

  absl::Status ExecutePerImage(KernelContext& ctx, const Entry& e, const Geometry& g,
                               const Tensor& x, const Tensor& w, const Tensor* b, const Tensor* sum,
                               Tensor* y) const {
    const int tasks = ctx.ParallelTasks(g.n, 1);
    const size_t slot = SlotBytes(e);
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(tasks * slot + e.w_bytes + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    SetThreads(1);
    DYNVM_ASSIGN_OR_RETURN(const void* wts, PrimitiveWeights(e, w, base + tasks * slot, base));
    const char* px = static_cast<const char*>(x.raw_data());
    const char* psum = sum != nullptr ? static_cast<const char*>(sum->raw_data()) : nullptr;
    char* py = static_cast<char*>(y->raw_data());
    const int64_t x_step = x.stride(0) * 4, y_step = y->numel() / g.n * 4;
    const int64_t sum_step = sum != nullptr ? sum->stride(0) * 4 : 0;
    const void* bias = b != nullptr ? b->raw_data() : nullptr;
    std::atomic<int64_t> next{0};
    std::vector<absl::Status> status(tasks);
    ctx.ParallelFor(tasks, 1, [&](int64_t t0, int64_t t1) {
      SetThreads(1);  // a pool worker, or the caller: one primitive per image, no OpenMP team
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t i = next.fetch_add(1); i < g.n && status[t].ok(); i = next.fetch_add(1)) {
          const std::array<BoundPrimitive, 4>& lane = e.lanes[t];
          status[t] = RunOnce(e, {&lane[0], &lane[1], &lane[2], &lane[3]}, px + i * x_step, wts,
                              bias, psum != nullptr ? psum + i * sum_step : nullptr,
                              py + i * y_step, base + t * slot);
        }
      }
    });
    for (const absl::Status& s : status) DYNVM_RETURN_IF_ERROR(s);
    return absl::OkStatus();
  }

  // ---- A batch-1 convolution split by rows over the VM's pool ----
  //
  // One image has nothing for the batch split to split, and oneDNN's OpenMP team (above
  // kMinParallelWork; one thread below it) waits for a descheduled thread at its join, and its
  // threads spin beside the VM's pool after it. Instead the output rows of the first spatial dim
  // split into blocks, each run by its own primitive at OpenMP count 1 (bound for that block:
  // its input rows with the halo the kernel needs, the image's padding only at its edges), the
  // blocks claimed dynamically by the VM's threads (ctx.ParallelForDynamic). A block's rows are
  // contiguous in a channels-last tensor at batch 1, and strided views of a plain one (reordered
  // as any plain operand is). Each output element is computed as one undivided dot product in
  // either case (the block changes which rows a primitive covers, not the sums).
  //
  // How many blocks: as ConvChunk splits units (at most two per thread, each of at least
  // kMinConvTaskMacs multiply-adds), with at least two output rows per block.

  int64_t RowBlocks(const KernelContext& ctx, const Geometry& g, int64_t macs, const Tensor& x,
                    const Tensor& y, const Tensor* sum) const {
    // Not a 1D conv: its rows are its only spatial dim, along which oneDNN's kernels block their
    // registers. Split, the openWakeWord STFT conv (one input channel, 257 outputs, 512 taps,
    // stride 160) took twice its unsplit work at 8 frames (38 -> 71 us) and, at 97 frames in 4
    // blocks, ran slower at 2 threads than at 1 on the shared machine (zoo-bench-s5 records,
    // docs/zoo.md); it stays on the path it had (one thread below kMinParallelWork).
    if (ctx.num_threads() < 2 || g.n != 1 || g.k < 2 || transpose_ || g.od[0] < 4 ||
        !y.is_contiguous() || (sum != nullptr && !sum->is_contiguous()) || x.rank() != g.k + 2) {
      return 1;
    }
    const int64_t by_work = macs / kMinConvTaskMacs;
    const int64_t by_rows = g.od[0] / 2;
    const int64_t by_threads = 2 * static_cast<int64_t>(ctx.ParallelTasks(by_rows, 1));
    return std::max<int64_t>(1, std::min({by_work, by_rows, by_threads}));
  }

  // The floats between consecutive rows of dim 2 (the first spatial dim) of a batch-1 tensor of
  // `dims`: channels-last (C times the later spatial dims), or plain (the later spatial dims).
  static int64_t RowStep(absl::Span<const int64_t> dims, bool channels_last) {
    int64_t step = channels_last ? dims[1] : 1;
    for (size_t i = 3; i < dims.size(); ++i) step *= dims[i];
    return step;
  }

  // Whether a block of rows of batch-1 `t` is read as a dense tensor: channels-last, or
  // contiguous with one channel (the same bytes); else it is a strided view.
  static bool DenseRows(const Tensor& t, bool channels_last) {
    return channels_last || (t.dim(1) == 1 && t.is_contiguous());
  }
  // The bytes between consecutive rows of dim 2 of batch-1 `t`.
  static int64_t RowBytes(const Tensor& t, bool channels_last) {
    return (DenseRows(t, channels_last) ? RowStep(t.dims(), true) : t.stride(2)) *
           static_cast<int64_t>(sizeof(float));
  }

  // Rows [r0, r1) of dim 2 of batch-1 `t` as a view: contiguous where DenseRows, else with t's
  // strides.
  static absl::StatusOr<Tensor> RowView(const Tensor& t, bool channels_last, int64_t r0,
                                        int64_t r1) {
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    dims[2] = r1 - r0;
    const int64_t offset = t.byte_offset() + r0 * RowBytes(t, channels_last);
    if (DenseRows(t, channels_last)) return Tensor::View(t.storage(), offset, t.dtype(), dims);
    return Tensor::View(t.storage(), offset, t.dtype(), dims, t.strides());
  }

  // Binds e's row blocks once: `blocks` blocks of about equal rows; none (row_blocks empty) when
  // oneDNN has only its reference implementation or no primitive for one of them.
  absl::Status BindRowBlocks(const Geometry& g, const Tensor& x, const Tensor& w, bool bias,
                             const Tensor* sum, const Tensor& y, int64_t blocks, Entry* e) const {
    if (e->row_blocks_bound) return absl::OkStatus();
    e->row_blocks_bound = true;
    const int64_t rows = g.od[0], span = (g.kd[0] - 1) * (g.dl[0] + 1) + 1;
    std::vector<std::unique_ptr<Entry>> entries;
    std::vector<int64_t> starts;
    for (int64_t i = 0; i <= blocks; ++i) starts.push_back(rows * i / blocks);
    for (int64_t i = 0; i < blocks; ++i) {
      Geometry gb = g;
      const int64_t first = starts[i] * g.st[0] - g.pl[0];  // the block's padded input
      const int64_t last = (starts[i + 1] - 1) * g.st[0] - g.pl[0] + span;  // rows [first, last)
      const int64_t in0 = std::max<int64_t>(0, first), in1 = std::min(g.in[0], last);
      gb.in[0] = in1 - in0;
      gb.pl[0] = in0 - first;
      gb.pr[0] = last - in1;
      gb.od[0] = starts[i + 1] - starts[i];
      DYNVM_ASSIGN_OR_RETURN(const Tensor xb, RowView(x, blocked_.in, in0, in1));
      DYNVM_ASSIGN_OR_RETURN(const Tensor yb, RowView(y, blocked_.out, starts[i], starts[i + 1]));
      Tensor sb;
      if (sum != nullptr) {
        DYNVM_ASSIGN_OR_RETURN(sb, RowView(*sum, blocked_.sum, starts[i], starts[i + 1]));
      }
      const Dims out_dims = OutDims(gb);
      const Dims y_strides(yb.strides().begin(), yb.strides().end());
      auto entry = std::make_unique<Entry>();
      DYNVM_RETURN_IF_ERROR(BindEntry(entry.get(), "convolution", [&](const dnnl::engine& engine) {
        Bind(engine, gb, xb, w, bias, sum != nullptr ? &sb : nullptr, out_dims, entry.get(),
             &y_strides);
      }));
      if (entry->use_fallback || entry->reference_impl) return absl::OkStatus();
      entries.push_back(std::move(entry));
    }
    e->row_starts = std::move(starts);
    e->row_blocks = std::move(entries);
    return absl::OkStatus();
  }

  absl::Status ExecuteRowBlocks(KernelContext& ctx, const Entry& e, const Geometry& g,
                                const Tensor& x, const Tensor& w, const Tensor* b,
                                const Tensor* sum, Tensor* y) const {
    const int64_t blocks = static_cast<int64_t>(e.row_blocks.size());
    const int tasks = ctx.ParallelTasks(blocks, 1);
    size_t slot = 0, w_bytes = 0;
    for (const auto& be : e.row_blocks) {
      slot = std::max(slot, SlotBytes(*be));
      w_bytes += be->w_bytes;
    }
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(tasks * slot + w_bytes + 64));
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws) + 63) & ~uintptr_t{63});
    SetThreads(1);
    // Each block's weights in its primitive's layout (one packing shared by blocks of the same
    // layout; reordered here, before the split, when the packed-weights cache is full).
    absl::InlinedVector<const void*, 8> wts(blocks);
    char* pw = base + tasks * slot;
    for (int64_t i = 0; i < blocks; ++i) {
      DYNVM_ASSIGN_OR_RETURN(wts[i], PrimitiveWeights(*e.row_blocks[i], w, pw, base));
      pw += e.row_blocks[i]->w_bytes;
    }
    const char* px = static_cast<const char*>(x.raw_data());
    const char* psum = sum != nullptr ? static_cast<const char*>(sum->raw_data()) : nullptr;
    char* py = static_cast<char*>(y->raw_data());
    const int64_t x_row = RowBytes(x, blocked_.in), y_row = RowBytes(*y, blocked_.out);
    const int64_t sum_row = sum != nullptr ? RowBytes(*sum, blocked_.sum) : 0;
    const void* bias = b != nullptr ? b->raw_data() : nullptr;
    absl::InlinedVector<absl::Status, 4> status(tasks);
    ctx.ParallelForDynamic(blocks, 1, [&](int t, int64_t i0, int64_t i1) {
      SetThreads(1);  // a pool worker, or the caller: one primitive per block, no OpenMP team
      for (int64_t i = i0; i < i1 && status[t].ok(); ++i) {
        const Entry& be = *e.row_blocks[i];
        const int64_t r0 = e.row_starts[i];
        const int64_t in0 = std::max<int64_t>(0, r0 * g.st[0] - g.pl[0]);
        status[t] = RunOnce(be, OwnPrims(be), px + in0 * x_row, wts[i], bias,
                            psum != nullptr ? psum + r0 * sum_row : nullptr, py + r0 * y_row,
                            base + t * slot);
      }
    });
    for (const absl::Status& s : status) DYNVM_RETURN_IF_ERROR(s);
    return absl::OkStatus();
  }

  ConvAttrs attrs_;
  bool transpose_;
  Activation act_;
  Activation act2_;  // "activation2": a second eltwise post-op after act_
  bool constant_weights_;
  BlockedPorts blocked_;
  DepthwiseStage dw_;
  PackedWeightsCache packed_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateConv(const KernelSpec& spec, bool transpose,
                                                   bool fused) {
  DYNVM_RETURN_IF_ERROR(CheckArity(spec, 2, fused ? 6 : 3, 1, 1));
  DYNVM_RETURN_IF_ERROR(RequireF32(spec, {0, 1}));
  for (size_t i = 2; i < spec.inputs.size(); ++i) {  // B and the residual, when present
    if (spec.inputs[i].dtype != kAnyDType) DYNVM_RETURN_IF_ERROR(RequireF32(spec, {i}));
  }
  ConvAttrs a;
  DYNVM_RETURN_IF_ERROR(ReadConvAttrs(spec, transpose, &a));
  Activation act, act2;
  bool constant_weights = false;
  BlockedPorts blocked;
  if (fused) {
    DYNVM_ASSIGN_OR_RETURN(act, ReadActivation(spec));
    DYNVM_ASSIGN_OR_RETURN(act2, ReadActivation(spec, "activation2"));
    DYNVM_ASSIGN_OR_RETURN(int64_t cw, spec.GetInt("constant_weights", 0));
    constant_weights = cw != 0;
    DYNVM_ASSIGN_OR_RETURN(int64_t bi, spec.GetInt("channels_last_in", 0));
    DYNVM_ASSIGN_OR_RETURN(int64_t bo, spec.GetInt("channels_last_out", 0));
    DYNVM_ASSIGN_OR_RETURN(int64_t bs, spec.GetInt("channels_last_sum", 0));
    blocked = {bi != 0, bo != 0, bs != 0};
  }
  DepthwiseStage dw;
  if (fused && spec.inputs.size() == 6) {
    dw.present = true;
    DYNVM_ASSIGN_OR_RETURN(dw.act, ReadActivation(spec, "dw_activation"));
    DYNVM_ASSIGN_OR_RETURN(dw.stride, spec.GetInt("dw_stride", 1));
    if (act2.present) {
      return absl::UnimplementedError(
          "FusedConv: activation2 with a depthwise stage is the reference kernel's");
    }
  }
  return std::make_unique<ConvKernel>(KernelName(spec, "any"), std::move(a), transpose, act, act2,
                                      constant_weights, blocked, dw);
}

}  // namespace

void RegisterConvKernels(KernelRegistry& r) {
  r.Register(KernelRegistration{
      "", "Conv", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& s) { return CreateConv(s, /*transpose=*/false, /*fused=*/false); }});
  r.Register(KernelRegistration{
      "", "ConvTranspose", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& s) { return CreateConv(s, /*transpose=*/true, /*fused=*/false); }});
  r.Register(KernelRegistration{
      "dynvm", "FusedConv", Device::kCPU, kBackend, kDnnlPriority,
      [](const KernelSpec& s) { return CreateConv(s, /*transpose=*/false, /*fused=*/true); }});
}

}  // namespace dynvm::onednn
