package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ModelVersion is the model summary format version this package reads.
const ModelVersion = 1

// Model is a model summary (model.json), written by scripts/model_summary.py
// for any torch nn.Module and described in docs/model-summary.md:
//
//	{
//	  "v": 1,
//	  "name": "resnet50",
//	  "framework": "pytorch 1.13.0",
//	  "parameters": 25557032,
//	  "trainable_parameters": 25557032,
//	  "param_bytes": 4,
//	  "activation_bytes_per_sample": 91438752,
//	  "flops_per_sample": 8178368512,
//	  "input_shape": [3, 224, 224],
//	  "activations_counted": "aten-outputs",
//	  "layers": [{"name": "conv1", "type": "Conv2d", "output_shape": [2, 64, 112, 112], "params": 9408, "output_bytes": 3211264}]
//	}
//
// Every field but activations_counted and layers is required. Figures are
// per sample and measured at the dtype of the parameters (param_bytes).
type Model struct {
	V         int    `json:"v"`         // format version, ModelVersion
	Name      string `json:"name"`      // model name, printable
	Framework string `json:"framework"` // e.g. "pytorch 1.13.0"
	// Parameters counts every parameter; TrainableParameters those with
	// requires_grad (they get gradients and optimizer state).
	Parameters          int64 `json:"parameters"`
	TrainableParameters int64 `json:"trainable_parameters"`
	// ParamBytes is bytes per parameter as stored (4: float32, 2: half).
	ParamBytes int `json:"param_bytes"`
	// ActivationBytesPerSample is the bytes of the tensors one sample's
	// forward pass creates, each storage counted once (views, in-place
	// results and parameters add nothing): what autograd may keep for the
	// backward pass (see ActivationsCounted).
	ActivationBytesPerSample int64 `json:"activation_bytes_per_sample"`
	// SavedBytesPerSample is the bytes autograd keeps for the backward pass
	// of one sample (saved_tensors_hooks), each storage once: usually less
	// than ActivationBytesPerSample (forward intermediates the backward does
	// not need are freed). Optional (older summaries); when present the
	// static model scales it instead of ActivationBytesPerSample.
	SavedBytesPerSample int64 `json:"saved_bytes_per_sample,omitempty"`
	// SavedHalfBytesPerSample is SavedBytesPerSample under CUDA's autocast
	// to half precision, emulated by the summary on the CPU: how much of
	// what autograd keeps autocast halves depends on the model (ResNet-50
	// 0.51, GPT-2 0.72). Optional; when present a GPU estimate under
	// bf16/fp16 scales it instead of HalfActivationFactor x the float32
	// bytes.
	SavedHalfBytesPerSample int64 `json:"saved_half_bytes_per_sample,omitempty"`
	// FLOPsPerSample is forward FLOPs for one sample, a multiply-add
	// counting as 2 (convolutions and matrix products).
	// Element-wise work is not counted; 0 for a model of embeddings only.
	FLOPsPerSample int64 `json:"flops_per_sample"`
	// FLOPsByKind splits FLOPsPerSample by kind of layer (conv, depthwise,
	// linear: matrix products), for the probed time model; optional (older
	// summaries: all FLOPs count as conv).
	FLOPsByKind map[string]int64 `json:"flops_by_kind,omitempty"`
	InputShape  []int            `json:"input_shape"` // one sample, e.g. [3, 224, 224]
	// ActivationsCounted says how ActivationBytesPerSample was measured:
	// "aten-outputs" (every tensor the forward pass created, at the
	// dispatcher, so functional calls count) or "leaf-outputs" (outputs of
	// leaf modules only); optional.
	ActivationsCounted string  `json:"activations_counted,omitempty"`
	Layers             []Layer `json:"layers,omitempty"`
}

// Layer is one leaf module of the summary. OutputShape is the first output
// tensor's shape as run (batch dimension first); OutputBytes is per sample.
type Layer struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	OutputShape []int  `json:"output_shape"`
	Params      int64  `json:"params"`
	OutputBytes int64  `json:"output_bytes"`
	// Kind is conv, depthwise, linear or other; FLOPs the layer's forward
	// FLOPs per sample (conv and linear modules only). Both optional.
	Kind  string `json:"kind,omitempty"`
	FLOPs int64  `json:"flops,omitempty"`
}

// DecodeModel reads a model summary strictly: an unknown, misspelt,
// duplicate or mistyped field, or a missing or impossible value, is a
// *FieldError naming the field.
func DecodeModel(b []byte) (*Model, error) {
	var m Model
	if err := decodeChecked(b, &m, "v", "name", "framework", "parameters", "trainable_parameters", "param_bytes",
		"activation_bytes_per_sample", "flops_per_sample", "input_shape"); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks a summary's values.
func (m *Model) Validate() error {
	if err := firstBad(m.checks()); err != nil {
		return err
	}
	if err := m.validateFLOPsByKind(); err != nil {
		return err
	}
	for i, d := range m.InputShape {
		if d <= 0 {
			return fieldErr(fmt.Sprintf("input_shape[%d]", i), "must be positive, got %d", d)
		}
	}
	for i := range m.Layers {
		if err := m.Layers[i].validate(fmt.Sprintf("layers[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// checks are the summary's own fields' checks, in the order Validate
// reports them.
func (m *Model) checks() []fieldCheck {
	return []fieldCheck{
		{m.V != ModelVersion, "v", "want %d (this build reads model summary version %d), got %d", []any{ModelVersion, ModelVersion, m.V}},
		{strings.TrimSpace(m.Name) == "", "name", "required", nil},
		{!printable(m.Name, 128), "name", "want up to 128 printable characters", nil},
		{!printable(m.Framework, 128), "framework", "want up to 128 printable characters", nil},
		{m.Parameters <= 0, "parameters", "required, must be positive", nil},
		{!within(m.TrainableParameters, 0, m.Parameters), "trainable_parameters", "must be between 0 and parameters (%d), got %d",
			[]any{m.Parameters, m.TrainableParameters}},
		{!slices.Contains([]int{1, 2, 4, 8}, m.ParamBytes), "param_bytes", "want 1, 2, 4 or 8 (bytes per parameter), got %d", []any{m.ParamBytes}},
		{m.ActivationBytesPerSample <= 0, "activation_bytes_per_sample", "required, must be positive", nil},
		{m.SavedBytesPerSample < 0, "saved_bytes_per_sample", "must not be negative", nil},
		{m.SavedHalfBytesPerSample < 0, "saved_half_bytes_per_sample", "must not be negative", nil},
		// 0 is possible (a model of embeddings only): its static time is 0
		{m.FLOPsPerSample < 0, "flops_per_sample", "must not be negative", nil},
		{!slices.Contains([]string{"", "aten-outputs", "leaf-outputs"}, m.ActivationsCounted), "activations_counted",
			"want \"aten-outputs\" or \"leaf-outputs\", got %q", []any{m.ActivationsCounted}},
		{!within(len(m.InputShape), 1, 8), "input_shape", "want 1 to 8 dimensions", nil},
	}
}

// validateFLOPsByKind checks flops_by_kind against flops_per_sample.
func (m *Model) validateFLOPsByKind() error {
	var kinded int64
	for k, f := range m.FLOPsByKind {
		switch {
		case !slices.Contains(flopKinds, k):
			return fieldErr(joinField("flops_by_kind", k), "unknown kind (want %s)", strings.Join(flopKinds, ", "))
		case !within(f, 0, m.FLOPsPerSample):
			return fieldErr(joinField("flops_by_kind", k), "must be between 0 and flops_per_sample (%d), got %d", m.FLOPsPerSample, f)
		}
		kinded += f
	}
	if kinded > m.FLOPsPerSample {
		return fieldErr("flops_by_kind", "adds up to %d, more than flops_per_sample (%d)", kinded, m.FLOPsPerSample)
	}
	return nil
}

// validate checks one layer; p is its path ("layers[3]").
func (l *Layer) validate(p string) error {
	if err := firstBad([]fieldCheck{
		{!printable(l.Name, 1024), p + ".name", "want up to 1024 printable characters", nil},
		{l.Type == "" || !printable(l.Type, 128), p + ".type", "required, up to 128 printable characters", nil},
		{l.Params < 0, p + ".params", "must not be negative", nil},
		{l.OutputBytes < 0, p + ".output_bytes", "must not be negative", nil},
		{l.Kind != "" && l.Kind != "other" && !slices.Contains(flopKinds, l.Kind), p + ".kind", "want conv, depthwise, linear or other, got %q", []any{l.Kind}},
		{l.FLOPs < 0, p + ".flops", "must not be negative", nil},
	}); err != nil {
		return err
	}
	for j, d := range l.OutputShape {
		if d < 0 {
			return fieldErr(fmt.Sprintf("%s.output_shape[%d]", p, j), "must not be negative")
		}
	}
	return nil
}

// InputBytesPerSample is the size of one input sample at the parameters'
// dtype (the first layer keeps its input for the backward pass).
func (m *Model) InputBytesPerSample() int64 {
	n := int64(1)
	for _, d := range m.InputShape {
		n *= int64(d)
	}
	return n * int64(m.ParamBytes)
}

// Fingerprint names the model for receipts: its name and a hash of the
// figures that decide memory and speed, so two summaries of the same
// network and input agree and a changed input shape does not.
func (m *Model) Fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "v1|%d|%d|%d|%d|%d", m.Parameters, m.TrainableParameters, m.ParamBytes, m.ActivationBytesPerSample, m.FLOPsPerSample)
	for _, d := range m.InputShape {
		h.Write([]byte("|" + strconv.Itoa(d)))
	}
	name := sanitize(m.Name, 40)
	if name == "" {
		name = "model"
	}
	return name + "-" + hex.EncodeToString(h.Sum(nil))[:8]
}

// sanitize keeps [A-Za-z0-9._-] (others become '-') and cuts to max bytes.
func sanitize(s string, max int) string {
	var b strings.Builder
	for _, c := range s {
		if b.Len() >= max {
			break
		}
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-.")
}

func printable(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == 0xfffd {
			return false
		}
	}
	return true
}
