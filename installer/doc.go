// Package installer holds no code: it is the Helm chart (helm/volcano-vgpu),
// the plain manifests rendered from it (manifests/) and the Dockerfiles
// (docker/). Its tests render the chart with helm (make installer-test).
package installer
