// Package compute is the node's compute controller: one control loop per GPU
// that sees every container sharing it. Real NVML's per-process utilization is
// coarse (about one sample a second), noisy and keyed by host pids that never
// match a container's, while the GPU-wide busy time is reliable; so the loop
// reads only the GPU's busy time, splits it among containers by the work each
// reported launching in the period (weighted by a per-container estimate of GPU
// time per cost unit, learned by regression over recent periods), and hands
// each container a launch allowance through its read-only control file
// (api.ControlDevice). libvcuda throttles launches locally against that
// allowance and falls back to a fixed rate when the heartbeat stops.
//
// The core (GPU.Step) is pure: plain values in, decisions out. Runner feeds it
// from NVML and the containers' files.
package compute
