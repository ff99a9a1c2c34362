package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// visibility is CUDA_VISIBLE_DEVICES as CUDA reads it.
type visibility struct {
	all     bool     // unset: every device
	entries []string // the entries CUDA uses, in order
}

func (v visibility) none() bool { return !v.all && len(v.entries) == 0 }

// parseVisible parses CUDA_VISIBLE_DEVICES. Unset means every device; set,
// it is a comma-separated list of device indexes, GPU UUIDs ("GPU-...", or a
// unique prefix of one) and MIG device UUIDs ("MIG-..." or the older
// "MIG-GPU-<uuid>/<gi>/<ci>"). Like CUDA, it stops at the first entry it cannot
// use: "" and "NoDevFiles" hide every device, "0,-1,1" shows only device 0.
// Entries that are well formed but name no device stop the list too, when the
// devices are resolved.
func parseVisible(v string, set bool) visibility {
	if !set {
		return visibility{all: true}
	}
	var out visibility
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if !isIndex(e) && !strings.HasPrefix(e, "GPU-") && !strings.HasPrefix(e, "MIG-") {
			break
		}
		out.entries = append(out.entries, e)
	}
	return out
}

func isIndex(s string) bool {
	if s == "" || len(s) > 6 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// physical is a GPU as NVML enumerates it.
type physical struct {
	dev  nvml.Device
	uuid string
	ok   bool // its handle and UUID could be read
}

// resolve turns the visible entries into device handles. Per-device failures
// are counted in errs; err means NVML itself is not usable.
func (c *Collector) resolve() (targets []target, errs int, err error) {
	n, ret := c.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, 0, fmt.Errorf("nvml device count: %v", ret)
	}
	phys := make([]physical, n)
	for i := range phys {
		d, ret := c.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			errs++
			continue
		}
		u, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			errs++
			continue
		}
		phys[i] = physical{dev: d, uuid: u, ok: true}
	}
	if c.visible.all {
		for i, p := range phys {
			if p.ok {
				targets = append(targets, physicalTarget(i, p, &errs))
			}
		}
		return targets, errs, nil
	}
	seen := map[string]bool{}
	for _, e := range c.visible.entries {
		t, valid, ok := c.lookup(e, phys, &errs)
		if !valid {
			break // CUDA ignores this entry and every one after it
		}
		if !ok || seen[t.uuid] {
			continue
		}
		seen[t.uuid] = true
		targets = append(targets, t)
	}
	return targets, errs, nil
}

// lookup resolves one CUDA_VISIBLE_DEVICES entry. valid is false when the
// entry names no device; ok is false when it names one that cannot be read
// now (counted in errs).
func (c *Collector) lookup(e string, phys []physical, errs *int) (t target, valid, ok bool) {
	switch {
	case isIndex(e):
		i, _ := strconv.Atoi(e)
		if i >= len(phys) {
			return t, false, false
		}
		if !phys[i].ok {
			return t, true, false
		}
		return physicalTarget(i, phys[i], errs), true, true
	case strings.HasPrefix(e, "GPU-"):
		i := matchUUID(phys, e)
		if i < 0 {
			return t, false, false
		}
		return physicalTarget(i, phys[i], errs), true, true
	case strings.HasPrefix(e, "MIG-GPU-"):
		return legacyMIG(e, phys, errs)
	default: // "MIG-<uuid>"
		return c.migByUUID(e, phys, errs)
	}
}

// matchUUID finds the GPU whose UUID is u or, as CUDA allows, starts with u
// and no other does. It returns -1 if none or several match.
func matchUUID(phys []physical, u string) int {
	found := -1
	for i, p := range phys {
		if !p.ok {
			continue
		}
		if p.uuid == u {
			return i
		}
		if strings.HasPrefix(p.uuid, u) {
			if found >= 0 {
				return -1
			}
			found = i
		}
	}
	return found
}

// physicalTarget is a whole GPU. On a GPU in MIG mode the parent's process
// lists carry no per-process memory, so its processes are read from each MIG
// device.
func physicalTarget(i int, p physical, errs *int) target {
	t := target{dev: p.dev, index: i, uuid: p.uuid}
	mode, _, ret := p.dev.GetMigMode()
	*errs += failed(ret)
	if ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
		t.sources = []source{{dev: p.dev, uuid: p.uuid}}
		return t
	}
	count, ret := p.dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		*errs += failed(ret)
		return t
	}
	for j := range count {
		m, ret := p.dev.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // no MIG device in this slot
		}
		if ret != nvml.SUCCESS {
			*errs++
			continue
		}
		u, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			*errs++
			continue
		}
		t.sources = append(t.sources, source{dev: m, uuid: u})
	}
	return t
}

// migByUUID resolves "MIG-<uuid>": NVML's DeviceGetHandleByUUID accepts MIG
// device UUIDs and returns the MIG device handle.
func (c *Collector) migByUUID(e string, phys []physical, errs *int) (t target, valid, ok bool) {
	m, ret := c.lib.DeviceGetHandleByUUID(e)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT:
		return t, false, false
	default:
		*errs++
		return t, true, false
	}
	parent, ret := m.GetDeviceHandleFromMigDeviceHandle()
	if ret != nvml.SUCCESS {
		*errs++
		return t, true, false
	}
	pu, ret := parent.GetUUID()
	if ret != nvml.SUCCESS {
		*errs++
		return t, true, false
	}
	i := matchUUID(phys, pu)
	if i < 0 {
		*errs++
		return t, true, false
	}
	u := e
	if mu, ret := m.GetUUID(); ret == nvml.SUCCESS {
		u = mu
	}
	return migTarget(m, u, i, pu), true, true
}

// legacyMIG resolves "MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance>",
// the MIG naming of drivers before R470.
func legacyMIG(e string, phys []physical, errs *int) (t target, valid, ok bool) {
	parts := strings.Split(strings.TrimPrefix(e, "MIG-"), "/")
	if len(parts) != 3 {
		return t, false, false
	}
	gi, err1 := strconv.Atoi(parts[1])
	ci, err2 := strconv.Atoi(parts[2])
	i := matchUUID(phys, parts[0])
	if err1 != nil || err2 != nil || i < 0 {
		return t, false, false
	}
	p := phys[i]
	count, ret := p.dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		*errs += failed(ret)
		return t, ret != nvml.ERROR_NOT_SUPPORTED, false
	}
	for j := range count {
		m, ret := p.dev.GetMigDeviceHandleByIndex(j)
		if ret != nvml.SUCCESS {
			continue
		}
		g, ret1 := m.GetGpuInstanceId()
		k, ret2 := m.GetComputeInstanceId()
		if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS || g != gi || k != ci {
			continue
		}
		u, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			*errs++
			return t, true, false
		}
		return migTarget(m, u, i, p.uuid), true, true
	}
	return t, false, false
}

func migTarget(m nvml.Device, uuid string, parentIndex int, parentUUID string) target {
	return target{
		dev:        m,
		index:      parentIndex,
		uuid:       uuid,
		parentUUID: parentUUID,
		sources:    []source{{dev: m, uuid: uuid}},
	}
}
