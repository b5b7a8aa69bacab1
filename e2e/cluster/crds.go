package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// applyCRDs creates (or updates) every CRD in dir and waits until each is
// established, so Volcano's controllers find their types at start.
func applyCRDs(ctx context.Context, rc *rest.Config, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no Volcano CRDs in %s: run `make build` (it copies them from the Volcano module)", dir)
	}
	sort.Strings(files)
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		objs, err := ReadObjects(f)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if err := Apply(ctx, dc, crdGVR, obj); err != nil {
				return fmt.Errorf("CRD %s from %s: %w", obj.GetName(), f, err)
			}
			names = append(names, obj.GetName())
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range names {
		for {
			obj, err := dc.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err == nil && established(obj) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established after 60s (last error: %v)", n, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func established(obj *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// ReadObjects reads every Kubernetes object of a multi-document YAML file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// Apply creates obj, or replaces it keeping the stored resourceVersion.
func Apply(ctx context.Context, dc dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	ri := dc.Resource(gvr)
	var r dynamic.ResourceInterface = ri
	if ns := obj.GetNamespace(); ns != "" {
		r = ri.Namespace(ns)
	}
	_, err := r.Create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur, err := r.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	obj.SetResourceVersion(cur.GetResourceVersion())
	_, err = r.Update(ctx, obj, metav1.UpdateOptions{})
	return err
}
