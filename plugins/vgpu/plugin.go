// Package vgpu is the Volcano session plugin that places fractional GPUs.
package vgpu

import (
	"volcano.sh/volcano/pkg/scheduler/framework"
)

// PluginName is the name to list in the scheduler configuration.
const PluginName = "vgpu"

type plugin struct {
	args framework.Arguments
}

// New builds the plugin for one session.
func New(args framework.Arguments) framework.Plugin {
	return &plugin{args: args}
}

func (p *plugin) Name() string { return PluginName }

func (p *plugin) OnSessionOpen(ssn *framework.Session) {}

func (p *plugin) OnSessionClose(ssn *framework.Session) {}
