package plan

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Precisions.
const (
	PrecFP32 = "fp32"
	PrecBF16 = "bf16"
	PrecFP16 = "fp16"
)

// Training is how the model is trained.
type Training struct {
	Optimizer string // see OptimizerStates
	Precision string // PrecFP32, PrecBF16 or PrecFP16 (torch.autocast)
}

// OptimizerStates is the fp32 state each optimizer keeps per trainable
// parameter, in parameter-sized tensors: plain SGD none, SGD with momentum
// its momentum buffer, Adam and AdamW the first and second moments.
var OptimizerStates = map[string]int{
	"sgd":      0,
	"momentum": 1, // SGD with momentum
	"nesterov": 1,
	"rmsprop":  1,
	"adagrad":  1,
	"adam":     2,
	"adamw":    2,
	"lamb":     2,
}

// Validate checks the optimizer and precision names.
func (t Training) Validate() error {
	if _, ok := OptimizerStates[t.Optimizer]; !ok {
		names := make([]string, 0, len(OptimizerStates))
		for n := range OptimizerStates {
			names = append(names, n)
		}
		slices.Sort(names)
		return fmt.Errorf("optimizer %q: want one of %s", t.Optimizer, strings.Join(names, ", "))
	}
	switch t.Precision {
	case PrecFP32, PrecBF16, PrecFP16:
		return nil
	}
	return fmt.Errorf("precision %q: want fp32, bf16 or fp16", t.Precision)
}

// Assumptions of the static memory model. They are deliberately on the
// high side: a static estimate that is too low gets a job killed, one that
// is too high costs a little queue time, and receipts correct it.
const (
	// BackwardFactor multiplies the forward activations: autograd keeps the
	// forward outputs for the backward pass, and the backward pass holds
	// gradients of activations while it runs (torchsummary's "forward/
	// backward pass size" is the same 2x). Measured on this machine,
	// ResNet-50's RSS grew by 0.78x of the static per-sample figure
	// (docs/model-summary.md), so 2 is an upper bound.
	BackwardFactor = 2.0
	// SavedFactor multiplies what autograd saves for the backward pass
	// (Model.SavedBytesPerSample), when the summary measured it: besides
	// the saved tensors, the backward pass holds the gradients of the
	// activations in flight and the convolutions' workspace. Measured on an
	// H100 (docs/gpu-check.md, "Prediction grid"): ResNet-50 at 224x224
	// grew by 1.22x its saved bytes per sample (99.7 vs 81.5 MiB), GPT-2
	// small by 1.01x (440 vs 435 MiB, loss included), against 1.14x and
	// 0.59x of the forward outputs that BackwardFactor scales.
	SavedFactor = 1.25
	// HalfActivationFactor scales activations under fp16/bf16 autocast:
	// convolution and matmul outputs are half size; batch norm and softmax
	// outputs stay fp32, which the in-place ReLU after batch norm shares.
	HalfActivationFactor = 0.5
	// GPUContextBytes is the CUDA context, cuDNN and cuBLAS handles and
	// workspace on the device, before any tensor: nvidia-smi's figure for
	// a training process less torch's max_memory_reserved was 742 MiB on an
	// H200 and 760 MiB on an H100 (PyTorch 2.11, CUDA 13; docs/gpu-check.md).
	GPUContextBytes = 768 << 20
	// CPUFrameworkBytes is the assumed RSS of Python with torch imported
	// (343 MiB measured here with torchvision, docs/model-summary.md),
	// used for node types without a probe record (Site.FrameworkBytes).
	CPUFrameworkBytes = 300 << 20
	// GPUHostBytes is the host RSS of a GPU job: Python, torch and the CUDA
	// runtime's host side; the weights are also loaded through the host.
	GPUHostBytes = 2 << 30
)

// Memory is a static memory estimate, bytes.
type Memory struct {
	Weights     int64 `json:"weights_bytes"`     // parameters, plus their half-precision copies under autocast
	Gradients   int64 `json:"gradients_bytes"`   // one fp32 gradient per trainable parameter
	Optimizer   int64 `json:"optimizer_bytes"`   // optimizer state
	Activations int64 `json:"activations_bytes"` // saved tensors and input x batch x SavedFactor (else forward outputs x BackwardFactor)
	Overhead    int64 `json:"overhead_bytes"`    // CUDA context on a GPU, Python+torch RSS on a CPU
}

// Total is the estimated peak.
func (m Memory) Total() int64 {
	return m.Weights + m.Gradients + m.Optimizer + m.Activations + m.Overhead
}

// PerSample is the part that grows with the batch, per sample.
func (m Memory) perSample(batch int) float64 {
	return float64(m.Activations) / float64(batch)
}

// StaticMemory estimates the peak memory of training m with the given batch
// on a device (device true: GPU memory) or on the host (CPU RSS).
//
// Mixed precision (fp16/bf16) means torch.autocast with fp32 parameters: the
// fp32 weights stay (they are the master copy), autocast caches a half copy
// of each weight per forward, gradients and optimizer state are fp32, and
// activations shrink by HalfActivationFactor.
func StaticMemory(m *Model, t Training, batch int, device bool) Memory {
	const fp32 = 4
	pb := int64(m.ParamBytes)
	var mem Memory
	mem.Weights = m.Parameters * pb
	half := 1.0
	if t.Precision != PrecFP32 {
		mem.Weights += m.Parameters * 2
		half = HalfActivationFactor
	}
	gradBytes := max(pb, fp32)
	mem.Gradients = m.TrainableParameters * gradBytes
	mem.Optimizer = m.TrainableParameters * fp32 * int64(OptimizerStates[t.Optimizer])
	// what the backward pass holds per sample: on a GPU the saved tensors
	// when the summary measured them, else every forward output. A CPU
	// node's peak is the process's RSS, and glibc keeps freed activation
	// memory on its heap: there every forward output counts. With the saved
	// bytes on the CPU grid (bench-predict, summaries of torch 1.13) the
	// static figure was under in 5 of 12 cells (down to -8.9 %), and the
	// profiled fit, whose slope is capped at the static one, in 3 of 6.
	perSample := float64(m.ActivationBytesPerSample+m.InputBytesPerSample()) * BackwardFactor * half
	switch {
	case device && half != 1 && m.SavedHalfBytesPerSample > 0:
		// what autocast keeps, measured by the summary's emulation at its
		// own precision; the input itself stays float32
		perSample = float64(m.SavedHalfBytesPerSample+m.InputBytesPerSample()) * SavedFactor
	case device && m.SavedBytesPerSample > 0:
		perSample = float64(m.SavedBytesPerSample+m.InputBytesPerSample()) * SavedFactor * half
	}
	mem.Activations = int64(math.Ceil(perSample * float64(batch)))
	if device {
		mem.Overhead = GPUContextBytes
	} else {
		mem.Overhead = CPUFrameworkBytes
	}
	return mem
}

// StaticMemoryOn is StaticMemory on node type nt: host memory on CPU and
// emulated GPU node types, with the framework footprint its probe measured
// when it has one (Site.FrameworkBytes). On a GPU, autocast training
// (bf16, fp16) of a summary with layers is the allocator replay's
// (ReplayedMemory, see usesReplay).
func (s *Site) StaticMemoryOn(m *Model, t Training, batch int, nt *NodeType) Memory {
	dev := nt.DeviceMemory()
	if usesReplay(m, t, nt) {
		if mem, ok := ReplayedMemory(m, t, batch, nt.DeviceMemoryBytes); ok {
			return mem
		}
	}
	mem := StaticMemory(m, t, batch, dev)
	if !dev {
		mem.Overhead, _ = s.FrameworkBytes(nt)
	}
	return mem
}

// StaticHostMemory is the host RSS of a job whose tensors live on a GPU:
// the framework, the CUDA runtime and a host copy of the weights.
func StaticHostMemory(m *Model) int64 {
	return CPUFrameworkBytes + GPUHostBytes + m.Parameters*int64(m.ParamBytes)
}

// Throughput is the training FLOPS a one-device job reaches on nt at a large
// batch: PeakFLOPS x Efficiency, or RelativeThroughput times the FLOPS per
// unit of relative throughput of the catalogue's node types that give both.
func (s *Site) Throughput(nt *NodeType, precision string) float64 {
	if peak := nt.PeakFLOPS.Get(precision); peak > 0 {
		return peak * s.efficiency(nt, precision)
	}
	// relative throughput only: borrow the unit from anchored node types
	var sum float64
	var n int
	for i := range s.NodeTypes {
		a := &s.NodeTypes[i]
		if a.PeakFLOPS.FP32 > 0 && a.RelativeThroughput > 0 {
			sum += a.PeakFLOPS.Get(precision) * s.efficiency(a, precision) / a.RelativeThroughput
			n++
		}
	}
	if n == 0 {
		// no node type gives both: treat relative throughput as the ratio to
		// the first anchored node type
		for i := range s.NodeTypes {
			a := &s.NodeTypes[i]
			if a.PeakFLOPS.FP32 > 0 {
				return nt.RelativeThroughput * a.PeakFLOPS.Get(precision) * s.efficiency(a, precision)
			}
		}
		return 0
	}
	return nt.RelativeThroughput * sum / float64(n)
}

func (s *Site) efficiency(nt *NodeType, precision string) float64 {
	if e := nt.Efficiency.Get(precision); e > 0 {
		return e
	}
	return DefaultEfficiency[nt.Kind].Get(precision)
}

// speedRatio is how much faster node type to trains than from: their
// RelativeThroughput when both give one, else their Throughput.
func (s *Site) speedRatio(from, to *NodeType, precision string) float64 {
	if from.RelativeThroughput > 0 && to.RelativeThroughput > 0 {
		return to.RelativeThroughput / from.RelativeThroughput
	}
	a, b := s.Throughput(from, precision), s.Throughput(to, precision)
	if a <= 0 || b <= 0 {
		return 1
	}
	return b / a
}

// batchEfficiency is the fraction of large-batch throughput reached at
// batch b: b / (b + HalfBatch).
func batchEfficiency(nt *NodeType, batch int) float64 {
	if nt.HalfBatch <= 0 {
		return 1
	}
	return float64(batch) / (float64(batch) + nt.HalfBatch)
}

// StaticIterSeconds is the static time of one training iteration. With a
// probe record of nt (fp32), each kind of layer's work over the rate the
// probe measured for it (probedIterSeconds); else forward FLOPs x 3
// (forward and a backward twice as expensive) x batch over the node type's
// assumed throughput. Either is divided by the batch efficiency.
func (s *Site) StaticIterSeconds(m *Model, nt *NodeType, t Training, batch int) float64 {
	if sec, ok := probedIterSeconds(s.Probe(nt), m, t, batch); ok {
		return sec / batchEfficiency(nt, batch)
	}
	tp := s.Throughput(nt, t.Precision) * batchEfficiency(nt, batch)
	if tp <= 0 {
		return math.Inf(1)
	}
	return 3 * float64(m.FLOPsPerSample) * float64(batch) / tp
}

// ReplayedMemory is the GPU memory of training m at the batch as the
// caching allocator would reserve it: the allocation trace of a few steps
// (allocTrace) replayed through the allocator's model (replayAllocator),
// plus the CUDA context. capacity is the device's memory (0: unlimited):
// where the replay needs more, the allocator's release of its cached
// segments is replayed, and a replay that still does not fit gives the
// unlimited figure (more than the device: it does not fit). ok is false
// for a summary without layers: split into equal layers, a convolution
// net's replay fragments far less than the real one (ResNet-18 reserved
// -21 to -37 % on the H100 grid; docs/gpu-check.md), so such a summary
// keeps StaticMemory and its band.
//
// It is the static GPU figure of autocast training (usesReplay): on the
// recorded bf16 cells it is within -6.9 to +6.1 % (StaticMemory: -14.2 to
// +15.3 %), and its band (staticBandGPUReplay) is the narrower. fp32 keeps
// StaticMemory: there the replay is under in 8 of 14 cells, to -15.9 %
// (ResNet-18: cuDNN's workspaces and the backward's in-place and residual
// gradients are not in the trace), where StaticMemory is in 4
// (docs/gpu-check.md).
func ReplayedMemory(m *Model, t Training, batch int, capacity int64) (mem Memory, ok bool) {
	if !hasLayerOutputs(m) {
		return Memory{}, false
	}
	events := allocTrace(m, t, batch)
	peak, err := replayAllocator(events, max(0, capacity-GPUContextBytes))
	if err != nil {
		if peak, err = replayAllocator(events, 0); err != nil {
			return Memory{}, false
		}
	}
	mem = StaticMemory(m, t, batch, true)
	// what it reserved beyond the weights, gradients and optimizer state
	mem.Activations = max(0, peak.Reserved-mem.Weights-mem.Gradients-mem.Optimizer)
	return mem, true
}

func hasLayerOutputs(m *Model) bool {
	for _, l := range m.Layers {
		if l.OutputBytes > 0 {
			return true
		}
	}
	return false
}

// usesReplay is whether m's static memory on nt is the allocator replay's:
// autocast training on a real GPU of a summary with layers.
func usesReplay(m *Model, t Training, nt *NodeType) bool {
	return nt.Kind == KindGPU && !nt.Emulated && (t.Precision == PrecBF16 || t.Precision == PrecFP16) && hasLayerOutputs(m)
}
