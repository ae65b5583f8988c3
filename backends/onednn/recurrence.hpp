// Our kernel for the recurrence of an LSTM or GRU layer (build_recurrent.cpp): the input's part of
// every gate for the whole sequence is one GEMM before it (oneDNN's matmul); what is left per time
// step is the state's part, a product with weights that stay in the core's L2 cache, and the
// cell. oneDNN's own RNN primitive (2.6) multiplies the input's weights again at every step: a
// second layer of a bidirectional LSTM, 256 wide over 512 features, streams 3 MB of weights per
// step and direction from L3 (59 ms at one thread where this takes a few; docs/onednn.md). AVX2
// and FMA, compiled for them whatever the build's flags; only called where the CPU has them.
// Internal (not installed), no LibTorch.
#pragma once

#include <cstdint>

namespace onednn_delegate::recurrence {

/// Columns of the state's weights a pass of the product computes: they are packed in panels of
/// this many (pack_state_weights).
inline constexpr std::int64_t panel = 64;
/// `columns` rounded up to whole panels.
inline std::int64_t padded(std::int64_t columns) { return (columns + panel - 1) / panel * panel; }

/// Packs one direction's weights on the state, PyTorch's [gates * hidden, hidden] (row j: gate
/// output j), into `into`: [padded(gates * hidden) / panel][hidden][panel], zeros past the last
/// row, so that the product reads them in one sequential pass.
void pack_state_weights(const float* weights, std::int64_t gates_hidden, std::int64_t hidden, float* into);

/// A layer's cell: an LSTM's, a GRU's (linear before reset), or an Elman RNN's with tanh or ReLU.
enum class cell { lstm, gru, tanh, relu };
/// Its gates: 4, 3, 1.
inline std::int64_t gates(cell kind) { return kind == cell::lstm ? 4 : kind == cell::gru ? 3 : 1; }

/// One layer, every direction, over a sequence whose rows (time step t of batch row n) are
/// n * steps + t when batch_first, else t * batch + n. Gates in oneDNN's order: an LSTM's input,
/// forget, cell, output (PyTorch's); a GRU's update, reset, new (PyTorch's z, r, n).
struct layer {
  cell kind = cell::lstm;
  bool batch_first = false;
  std::int64_t steps = 0, batch = 0, hidden = 0, directions = 1;
  /// [rows][directions * gates * hidden]: the input's part of each gate, its biases added (a GRU's
  /// new gate: the input's bias only).
  const float* input_gates = nullptr;
  /// Per direction, pack_state_weights's panels, one direction after the other.
  const float* packed = nullptr;
  /// A GRU's bias of the new gate on the state ([directions][hidden]), which the reset gate scales.
  const float* new_gate_bias = nullptr;
  /// The initial states, [directions][batch][hidden] each (c: an LSTM's); null: zeros.
  const float* h0 = nullptr;
  const float* c0 = nullptr;
  /// [rows][directions * hidden]: each direction's hidden state at every step, side by side.
  float* out = nullptr;
};

/// Whether the CPU has AVX2 and FMA (run() needs them).
bool cpu_supported();

/// The independent parts of `l`: per direction, its batch rows in groups of up to 4 (the
/// product reads each weight once for a group). run_task() computes part `task` over the whole
/// sequence; the parts may run on threads of their own at once.
std::int64_t tasks(const layer& l);
void run_task(const layer& l, std::int64_t task);

}  // namespace onednn_delegate::recurrence
