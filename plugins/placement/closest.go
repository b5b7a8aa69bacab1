package placement

import "fmt"

// Closest remembers, over the nodes a pod failed on, the refusal that came
// nearest to fitting: the GPU whose free memory (or cores) is the largest
// share of what the container asks. It names the node and the GPU and gives
// the numbers, for the message a person reads ("a100-0 GPU-1a2b (A100-80GB):
// 6144 MiB free, container "train" asks 8192 MiB"). The zero value is ready;
// it is not safe for concurrent use.
type Closest struct {
	node string
	r    Reason
}

// Add considers one node's reasons, as Fit returned them.
func (c *Closest) Add(node string, reasons []Reason) {
	for i := range reasons {
		r := &reasons[i]
		if !r.NodeLevel() || r.Best == "" || (r.Code != CodeMemory && r.Code != CodeCores) || r.Want <= 0 {
			continue
		}
		if c.node == "" || r.nearness() > c.r.nearness() {
			c.node, c.r = node, *r
		}
	}
}

// nearness is what the best GPU has as a fraction of the ask.
func (r *Reason) nearness() float64 { return float64(max(r.Have, 0)) / float64(r.Want) }

// String is the closest refusal, or "" when no node came close (every node
// refused for a reason other than memory or cores).
func (c *Closest) String() string {
	if c.node == "" {
		return ""
	}
	r := c.r
	g := Reason{Code: r.Code, Container: r.Container, GPU: r.Best, Model: r.Model, Want: r.Want, Have: r.Have, Percent: r.Percent}
	return fmt.Sprintf("%s %s", c.node, g.Error())
}
