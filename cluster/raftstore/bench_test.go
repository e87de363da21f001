package raftstore

import (
	"testing"

	raftbench "github.com/hashicorp/raft/bench"
)

// The benchmarks hashicorp/raft ships for every LogStore/StableStore.
func BenchmarkFirstIndex(b *testing.B) { d, _ := openTest(b); raftbench.FirstIndex(b, d.Group("b")) }
func BenchmarkLastIndex(b *testing.B)  { d, _ := openTest(b); raftbench.LastIndex(b, d.Group("b")) }
func BenchmarkGetLog(b *testing.B)     { d, _ := openTest(b); raftbench.GetLog(b, d.Group("b")) }
func BenchmarkStoreLog(b *testing.B)   { d, _ := openTest(b); raftbench.StoreLog(b, d.Group("b")) }
func BenchmarkStoreLogs(b *testing.B)  { d, _ := openTest(b); raftbench.StoreLogs(b, d.Group("b")) }
func BenchmarkDeleteRange(b *testing.B) {
	d, _ := openTest(b)
	raftbench.DeleteRange(b, d.Group("b"))
}
func BenchmarkSet(b *testing.B)       { d, _ := openTest(b); raftbench.Set(b, d.Group("b")) }
func BenchmarkGet(b *testing.B)       { d, _ := openTest(b); raftbench.Get(b, d.Group("b")) }
func BenchmarkSetUint64(b *testing.B) { d, _ := openTest(b); raftbench.SetUint64(b, d.Group("b")) }
func BenchmarkGetUint64(b *testing.B) { d, _ := openTest(b); raftbench.GetUint64(b, d.Group("b")) }
