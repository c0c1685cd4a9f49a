// `kube cel` (main.go dispatches here): DRA CEL selectors evaluated by the scheduler's own code
// (k8s.io/dynamic-resource-allocation/cel, what the structured allocator in
// k8s.io/dynamic-resource-allocation/structured runs for every candidate
// device), so the chart's DeviceClasses and our examples are checked against
// the devices kube-rdma publishes without a cluster.
//
// Input (stdin, JSON):
//
//	{"cases":   [{"name": "...", "selectors": ["<CEL>", ...]}],
//	 "devices": [{"driver": "rdma.kuberdma.io", "device": <a ResourceSlice device as the API holds it>}]}
//
// Each case is a list of selectors applied in order, as the allocator applies
// a DeviceClass's selectors and then a request's: the first that does not
// match ends the case for that device, and a runtime error is an error, which
// fails the whole allocation in the allocator ("CEL runtime error").
// Selectors are compiled as the API server compiles stored expressions (with
// its cost estimate), so a selector the API server would refuse is a compile
// error here.
//
// Output (stdout, JSON): {"compileErrors": [{"case", "selector", "error"}],
// "results": [{"case", "device", "driver", "matches", "error"}]}. Exit 0 when
// the input could be read (errors of the selectors are results), 2 otherwise.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

type celCase struct {
	Name      string   `json:"name"`
	Selectors []string `json:"selectors"`
}

type celDevice struct {
	Driver string             `json:"driver"`
	Device resourceapi.Device `json:"device"`
}

type celInput struct {
	Cases   []celCase   `json:"cases"`
	Devices []celDevice `json:"devices"`
}

type celCompileError struct {
	Case     string `json:"case"`
	Selector int    `json:"selector"`
	Error    string `json:"error"`
}

type celResult struct {
	Case    string `json:"case"`
	Device  string `json:"device"`
	Driver  string `json:"driver"`
	Matches bool   `json:"matches"`
	Error   string `json:"error,omitempty"`
}

type celOutput struct {
	CompileErrors []celCompileError `json:"compileErrors"`
	Results       []celResult       `json:"results"`
}

func celMain(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "kube cel: no arguments; the cases and devices come as JSON on stdin")
		return 2
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube cel: reading stdin: %v\n", err)
		return 2
	}
	var in celInput
	if err := json.Unmarshal(raw, &in); err != nil {
		fmt.Fprintf(os.Stderr, "kube cel: stdin is not the expected JSON: %v\n", err)
		return 2
	}
	out := celEvaluate(context.Background(), in)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "kube cel: writing the result: %v\n", err)
		return 2
	}
	return 0
}

func celEvaluate(ctx context.Context, in celInput) celOutput {
	// The features of a 1.34 scheduler with its defaults (DRAConsumableCapacity is alpha, off).
	compiler := cel.GetCompiler(cel.Features{})
	out := celOutput{CompileErrors: []celCompileError{}, Results: []celResult{}}
	for _, c := range in.Cases {
		programs := make([]cel.CompilationResult, 0, len(c.Selectors))
		ok := true
		for i, expr := range c.Selectors {
			p := compiler.CompileCELExpression(expr, cel.Options{})
			if p.Error != nil {
				out.CompileErrors = append(out.CompileErrors, celCompileError{Case: c.Name, Selector: i, Error: p.Error.Error()})
				ok = false
			}
			programs = append(programs, p)
		}
		if !ok {
			continue
		}
		for _, d := range in.Devices {
			r := celResult{Case: c.Name, Device: d.Device.Name, Driver: d.Driver, Matches: true}
			input := cel.Device{Driver: d.Driver, Attributes: d.Device.Attributes, Capacity: d.Device.Capacity}
			for i, p := range programs {
				matches, _, err := p.DeviceMatches(ctx, input)
				if err != nil {
					// The allocator's wording (structured/internal/stable/allocator_stable.go).
					r.Matches = false
					r.Error = fmt.Sprintf("selector #%d: CEL runtime error: %v", i, err)
					break
				}
				if !matches {
					r.Matches = false
					break
				}
			}
			out.Results = append(out.Results, r)
		}
	}
	return out
}
