package plan

import "testing"

// TestAllocTraceLive: after the steps only the parameters, the batch,
// the parameters' gradients and the optimizer state are live; every
// activation, gradient of an activation, weight copy and temporary was
// freed.
func TestAllocTraceLive(t *testing.T) {
	t.Parallel()
	m := &Model{Parameters: 300, TrainableParameters: 300, ParamBytes: 4, ActivationBytesPerSample: 3000,
		SavedBytesPerSample: 2000, InputShape: []int{10},
		Layers: []Layer{{OutputBytes: 1000, Params: 100}, {OutputBytes: 0}, {OutputBytes: 3000, Params: 200, Kind: "linear"}}}
	for _, tc := range []struct {
		tr   Training
		want int64
	}{
		{Training{"adam", PrecFP32}, 300*4 + 10*4*2 + 300*4 + 2*300*4},
		{Training{"sgd", PrecBF16}, 300*4 + 10*4*2 + 300*4},
	} {
		live := map[int]int64{}
		for _, e := range allocTrace(m, tc.tr, 2) {
			if e.Free {
				delete(live, e.ID)
			} else {
				live[e.ID] = e.Size
			}
		}
		var sum int64
		for _, s := range live {
			sum += s
		}
		if sum != tc.want {
			t.Errorf("%v: %d bytes live after the steps, want %d", tc.tr, sum, tc.want)
		}
	}
	// the layers' outputs split what autograd saves plus the input: 1:3
	layers := traceLayers(m, Training{"adam", PrecFP32}, 2)
	if len(layers) != 2 || layers[0].act != 1020 || layers[1].act != 3060 || layers[0].temp != 1000 {
		t.Errorf("layers %+v", layers)
	}
}
