package compute

import "github.com/volcano-vgpu/volcano-vgpu/api"

// What the controller is given each period and what it decides (Step).

// Tenant is one container's claim on a GPU.
type Tenant struct {
	Key    string            // pod UID / container, stable across restarts
	Share  float64           // guaranteed fraction of the GPU, 0..1; >= 1: none asked (best effort)
	Policy api.ComputePolicy // fixed, balance or none
}

// Report is what the container's limiter reported (cumulative counters).
type Report struct {
	Launched uint64
	Waits    uint64
	// Latest is the counter at the newest reading (Launched is read at the
	// edge of a device window, which arrives late). A launch is counted
	// before it waits, so Latest above the allowance means the tenant is
	// held right now. 0: not known (Launched stands in).
	Latest uint64
	// Lost: the counter went backwards after the window's edge (device
	// samples arrive late), so what the tenant had launched by the edge
	// went with the old counter.
	Lost bool
}

// latest is the newest reading of the tenant's counter.
func (r Report) latest() uint64 { return max(r.Latest, r.Launched) }

// TenantInput is one tenant's claim and report for a period.
type TenantInput struct {
	Tenant
	Report
}

// Input is one control period of one GPU.
type Input struct {
	BusyNs   float64 // GPU-wide busy time measured over the period (NVML device utilization)
	PeriodNs float64
	ClockMHz float64 // the SM clock's mean over the period (0: not read; ClockSource)
	NowNs    uint64  // CLOCK_MONOTONIC, stamped into the allowances
	// LagNs: how long before NowNs the period ended (device samples arrive
	// late); the loop's dead time.
	LagNs float64
	// Partial: the period began before the GPU's tenants last changed (one
	// started, one left), so its busy time may hold work that no tenant's
	// counter covers: a tenant's launches before its first reading, the last
	// work of one gone. Seen late, such periods came after a change for
	// 200 ms and read a joining pair's cost at 160-257 ns per unit for a
	// true 125 (fake driver). It neither teaches the cost estimate nor
	// moves a tenant's integral or the back-off.
	Partial bool
	// Unshared: per-process samples give no tenant's share of this GPU
	// (none are taken, or they leave out tenants that launched, as an
	// H200's one sample a round does): tenants take turns lending share
	// (excitation), and the device-wide busy time fits each one's cost.
	Unshared bool
	Tenants  []TenantInput
	// Measurement, when per-process samples for a window arrived since the
	// last period (about once a second; nil otherwise and without Owners).
	Measurement *Measurement
}

// Decision is a tenant's allowance after a period, and how its period was seen.
type Decision struct {
	Key      string
	Control  api.ControlDevice
	Share    float64 // the target this period (balance: with lent capacity)
	Lent     float64 // what the turns lend it (+) or take from it (-) on top of Share (excite.go)
	Measured float64 // the busy fraction attributed to the tenant
	// Cost is the GPU ns per launched unit the attribution used; Calibrated
	// says it comes from the tenant's own measured GPU time (per-process
	// samples), not only from the device-wide estimate.
	Cost       float64
	Calibrated bool
	Units      float64 // cost units charged to the tenant this period
	// Rewinds counts the periods in which the tenant's launched counter went
	// backwards (tampering, or a report file created anew): each is charged
	// as what the tenant was allowed.
	Rewinds uint64
}
