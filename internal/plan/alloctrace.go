package plan

import "math"

// The allocation trace of training steps, synthesized from a model
// summary for the allocator replay (allocator.go). A summary has no
// per-tensor sizes: it has per-sample totals (what the forward pass
// creates, what autograd saves) and, when made with layers, each leaf
// module's output and parameter count. The trace takes one tensor per
// layer and scales the layers' outputs so that they add up to what
// autograd saves (the totals are measured, the layers' split of them is
// the best guess there is). Assumptions, one training step as
// scripts/gpu_grid.py and a usual loop run it (zero_grad(set_to_none=True),
// forward under autocast, backward, Adam's foreach step):
//
//   - the parameters and the batch are allocated once, before the steps;
//   - zero_grad frees the parameters' gradients of the last step;
//   - the forward pass allocates each layer's saved output in order, and
//     under autocast first a half copy of its weights, kept for the
//     backward pass; the bytes the forward creates but autograd does not
//     keep are a temporary per layer, freed once the next layer ran;
//   - the backward pass, from the last layer: the gradient of the layer's
//     input is allocated (none for the first layer: the input needs
//     none), then its parameters' gradient (fp32, kept until zero_grad),
//     then the gradient of its output, its saved output and its weight
//     copy are freed;
//   - the optimizer allocates its state per parameter tensor at the
//     first step and keeps it; Adam's foreach step (two states) allocates
//     one parameter-sized temporary per parameter tensor
//     (torch._foreach_sqrt of the second moment) and frees them after;
//   - the loss, the labels, cuDNN's and cuBLAS's workspaces and the
//     autograd graph's own small tensors are left out.
//
// traceSteps steps are replayed: the first allocates the optimizer state
// where the backward pass freed activations, and the allocator's segments
// settle after it.
const traceSteps = 3

// traceLayer is one layer of the trace: its saved output for the whole
// batch and its parameters, bytes.
type traceLayer struct {
	act    int64 // saved output, batch included
	temp   int64 // created by the forward, not kept, batch included
	params int64 // parameter count
	half   bool  // autocast keeps a half copy of its weights
}

// traceLayers is the model as the trace sees it, at the precision and
// batch: each layer's share of the layers' outputs of what autograd
// saves, and an equal share of what the forward creates and does not
// save (GPT-2's attention scores and logits copies are no layer's output,
// and a share by outputs gave its 50257-wide head a temporary of 1.5 x the
// logits: 15 to 20 % over on the H100 grid). Layers with neither output
// nor parameters (in-place ReLUs) are left out; the summary must have some
// output (ReplayedMemory checks).
func traceLayers(m *Model, t Training, batch int) []traceLayer {
	saved, created := traceBytesPerSample(m, t)
	var outs []float64
	var params []int64
	var half []bool
	for _, l := range m.Layers {
		if l.OutputBytes == 0 && l.Params == 0 {
			continue
		}
		outs = append(outs, float64(l.OutputBytes))
		params = append(params, l.Params)
		half = append(half, l.Params > 0 && (l.Kind == "" || l.Kind == "conv" || l.Kind == "depthwise" || l.Kind == "linear"))
	}
	var sum float64
	for _, o := range outs {
		sum += o
	}
	layers := make([]traceLayer, len(outs))
	for i, o := range outs {
		share := o / sum * float64(batch)
		layers[i] = traceLayer{
			act:    int64(math.Ceil(share * saved)),
			temp:   int64(math.Ceil(float64(batch) / float64(len(outs)) * max(0, created-saved))),
			params: params[i],
			half:   half[i] && t.Precision != PrecFP32,
		}
	}
	return layers
}

// traceBytesPerSample is what autograd keeps of one sample (the input
// included) and what the forward pass creates, at the training's
// precision: the summary's measured figures, halved by
// HalfActivationFactor under autocast where it has no emulated ones.
func traceBytesPerSample(m *Model, t Training) (saved, created float64) {
	created = float64(m.ActivationBytesPerSample)
	saved = created
	if m.SavedBytesPerSample > 0 {
		saved = float64(m.SavedBytesPerSample)
	}
	if t.Precision != PrecFP32 {
		f := HalfActivationFactor
		if m.SavedHalfBytesPerSample > 0 && m.SavedBytesPerSample > 0 {
			f = float64(m.SavedHalfBytesPerSample) / float64(m.SavedBytesPerSample)
		}
		saved *= f
		created *= f
	}
	return saved + float64(m.InputBytesPerSample()), created + float64(m.InputBytesPerSample())
}

// traceBuilder hands out tensor ids and records the events.
type traceBuilder struct {
	events []allocEvent
	next   int
}

func (b *traceBuilder) malloc(size int64) int {
	if size <= 0 {
		return -1
	}
	b.next++
	b.events = append(b.events, allocEvent{ID: b.next, Size: size})
	return b.next
}

func (b *traceBuilder) free(id int) {
	if id > 0 {
		b.events = append(b.events, allocEvent{ID: id, Free: true})
	}
}

// allocTrace is the trace of traceSteps training steps of m at the batch.
func allocTrace(m *Model, t Training, batch int) []allocEvent {
	layers := traceLayers(m, t, batch)
	pb := int64(m.ParamBytes)
	b := &traceBuilder{}
	for _, l := range layers {
		b.malloc(l.params * pb)
	}
	b.malloc(m.InputBytesPerSample() * int64(batch))
	grads := make([]int, len(layers))
	for step := range traceSteps {
		for i := range grads {
			b.free(grads[i])
			grads[i] = -1
		}
		acts, copies := traceForward(b, layers)
		traceBackward(b, layers, acts, copies, grads, max(pb, 4))
		if step == 0 {
			traceOptimizerState(b, layers, t, max(pb, 4))
		}
		if OptimizerStates[t.Optimizer] == 2 {
			var temps []int
			for _, l := range layers {
				temps = append(temps, b.malloc(l.params*max(pb, 4)))
			}
			for _, id := range temps {
				b.free(id)
			}
		}
	}
	return b.events
}

// traceForward allocates each layer's weight copy and saved output, and
// its temporary until the next layer ran.
func traceForward(b *traceBuilder, layers []traceLayer) (acts, copies []int) {
	acts, copies = make([]int, len(layers)), make([]int, len(layers))
	temp := -1
	for i, l := range layers {
		copies[i] = -1
		if l.half {
			copies[i] = b.malloc(l.params * 2)
		}
		acts[i] = b.malloc(l.act)
		b.free(temp)
		temp = b.malloc(l.temp)
	}
	b.free(temp)
	return acts, copies
}

// traceBackward runs the layers backwards: the input's gradient, the
// parameters' gradient (kept in grads), then the output's gradient, the
// saved output and the weight copy go.
func traceBackward(b *traceBuilder, layers []traceLayer, acts, copies, grads []int, gradBytes int64) {
	gradOut := b.malloc(layers[len(layers)-1].act)
	for i := len(layers) - 1; i >= 0; i-- {
		gradIn := -1
		if i > 0 {
			gradIn = b.malloc(layers[i-1].act)
		}
		grads[i] = b.malloc(layers[i].params * gradBytes)
		b.free(gradOut)
		b.free(acts[i])
		b.free(copies[i])
		gradOut = gradIn
	}
}

// traceOptimizerState allocates the optimizer's state per parameter
// tensor, never freed.
func traceOptimizerState(b *traceBuilder, layers []traceLayer, t Training, bytes int64) {
	for range OptimizerStates[t.Optimizer] {
		for _, l := range layers {
			b.malloc(l.params * bytes)
		}
	}
}
