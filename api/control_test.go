package api

import (
	"encoding/binary"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// cLayout prints the layout of vcuda_control.h as the C compiler sees it.
const cLayout = `#include <stdio.h>
#include "vcuda_control.h"
int main(void) {
	printf("control_size=%zu usage_size=%zu dev=%zu allowance=%zu rate=%zu fallback=%zu stamp=%zu mode=%zu period=%zu slot=%zu,%zu,%zu,%zu/%d waits=%zu count=%zu costs=%zu v1=%d\n",
	       sizeof(struct vcuda_control), sizeof(struct vcuda_usage), offsetof(struct vcuda_control, dev),
	       offsetof(struct vcuda_control_device, allowance), offsetof(struct vcuda_control_device, rate_bits),
	       offsetof(struct vcuda_control_device, fallback_bits), offsetof(struct vcuda_control_device, stamp_ns),
	       offsetof(struct vcuda_control_device, mode), offsetof(struct vcuda_control_device, period_us),
	       offsetof(struct vcuda_control_device, slot_period_us), offsetof(struct vcuda_control_device, slot_start_us),
	       offsetof(struct vcuda_control_device, slot_len_us), offsetof(struct vcuda_control_device, slot_flags),
	       VCUDA_SLOT_CONFINE,
	       offsetof(struct vcuda_usage_device, waits), offsetof(struct vcuda_control, device_count),
	       offsetof(struct vcuda_control, cost_bits), VCUDA_CONTROL_SIZE_V1);
	printf("magic=%u version=%u umagic=%u uversion=%u stale=%d file=%s ufile=%s\n", VCUDA_CONTROL_MAGIC,
	       VCUDA_CONTROL_VERSION, VCUDA_USAGE_MAGIC, VCUDA_USAGE_VERSION, VCUDA_CONTROL_STALE_PERIODS,
	       VCUDA_CONTROL_FILE, VCUDA_USAGE_FILE);
	printf("none=%d limited=%d unlimited=%d\n", VCUDA_CONTROL_NONE, VCUDA_CONTROL_LIMITED, VCUDA_CONTROL_UNLIMITED);
	return 0;
}
`

func TestControlLayoutMatchesCHeader(t *testing.T) {
	bin := buildC(t, cLayout)
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := fmt.Sprintf("control_size=%d usage_size=%d dev=%d allowance=%d rate=%d fallback=%d stamp=%d mode=%d period=%d slot=%d,%d,%d,%d/%d waits=%d count=%d costs=%d v1=%d\n",
		ControlFileSize, UsageFileSize, controlHeaderSize, controlOffAllowance, controlOffRate, controlOffFallback,
		controlOffStamp, controlOffMode, controlOffPeriod, controlOffSlotPeriod, controlOffSlotStart, controlOffSlotLen,
		controlOffSlotFlags, slotConfine, usageOffWaits, controlOffDeviceCount, controlOffCosts, ControlFileSizeV1) +
		fmt.Sprintf("magic=%d version=%d umagic=%d uversion=%d stale=%d file=%s ufile=%s\n", ControlMagic,
			ControlVersion, UsageMagic, UsageVersion, ControlStalePeriods, ControlFile, UsageFile) +
		fmt.Sprintf("none=%d limited=%d unlimited=%d\n", ControlNone, ControlLimited, ControlUnlimited)
	if string(out) != want {
		t.Errorf("C header and Go mirror differ:\nC:  %sGo: %s", out, want)
	}
}

func TestControlPublishRoundTrip(t *testing.T) {
	b, err := NewControl(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckControl(b, 2); err != nil {
		t.Fatal(err)
	}
	d := ControlDevice{Allowance: 12345, Rate: 0.25, Fallback: 0.2, StampNs: 99, Mode: ControlLimited, PeriodUs: 100000,
		Slot: Slot{PeriodUs: 40000, StartUs: 12000, LenUs: 28000, Confine: true}, Cost: 0.835}
	PublishControl(b, 1, d)
	PublishControl(b, 1, d)
	got, seq := ReadControl(b, 1)
	if got != d || seq != 4 {
		t.Errorf("ReadControl = %+v seq %d, want %+v seq 4", got, seq, d)
	}
	if d0, seq := ReadControl(b, 0); seq != 0 || d0.Cost != 0 {
		t.Errorf("device 0 seq %d cost %v, want untouched", seq, d0.Cost)
	}
}

// TestControlV1: a version 1 control file (before the costs: a container
// started before them) is accepted as it is; its entries read and write as
// before, with no cost.
func TestControlV1(t *testing.T) {
	b, _ := NewControl(2)
	v1 := append([]byte(nil), b[:ControlFileSizeV1]...)
	binary.LittleEndian.PutUint32(v1[4:], ControlVersionV1)
	binary.LittleEndian.PutUint32(v1[8:], ControlFileSizeV1)
	if err := CheckControl(v1, 2); err != nil {
		t.Fatalf("a version 1 file: %v", err)
	}
	d := ControlDevice{Allowance: 7, Rate: 0.5, Mode: ControlLimited, PeriodUs: 100000, Slot: Slot{PeriodUs: 40000, LenUs: 20000}, Cost: 0.8}
	PublishControl(v1, 1, d)
	got, seq := ReadControl(v1, 1)
	d.Cost = 0
	if got != d || seq != 2 {
		t.Errorf("version 1 entry %+v seq %d, want %+v seq 2", got, seq, d)
	}
	for name, bad := range map[string][]byte{
		"version 1 header at the current size": append(append([]byte(nil), v1...), make([]byte, ControlFileSize-ControlFileSizeV1)...),
		"current header at version 1's size":   b[:ControlFileSizeV1],
	} {
		if err := CheckControl(bad, 2); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestControlHeaderErrorsNameTheField(t *testing.T) {
	b, _ := NewControl(1)
	tests := []struct {
		name string
		b    []byte
		n    int
		want string
	}{
		{name: "short", b: b[:10], n: 1, want: "bytes, want"},
		{name: "wrong device count", b: b, n: 2, want: "1 devices, want 2"},
		{name: "a usage report is not a control file", b: func() []byte { c := append([]byte(nil), b...); c[0] = 0; return c }(), n: 1, want: "magic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckControl(tt.b, tt.n)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckControl = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := NewControl(0); err == nil {
		t.Error("NewControl(0) accepted")
	}
}
