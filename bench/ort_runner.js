// ONNX Runtime (onnxruntime-node) in a process of its own, driven by bench/ort_models.py over
// stdin/stdout, one JSON object per line each way, so that its calls can be interleaved with
// LibTorch's and ours round after round.
//   {"load": "m.onnx", "input": "x.bin", "shape": [1, 3, 224, 224], "threads": 2}
//       -> {"loaded": true, "version": "1.30.0", "output": "x.bin.ort"}  (the first output, raw float32)
//   {"feed": "y.bin", "shape": [8, 3, 224, 224]}
//       -> {"output": "y.bin.ort", "dims": [...]}  (another input for the loaded model: a model exported
//          with dynamic axes runs other shapes; the next "time" requests run this one)
//   {"time": 4}  -> {"ms": [..4 call times..]}
//   {"quit": true}
// Errors come back as {"error": "..."}; the runner goes on with the next request.
const fs = require("fs");
const readline = require("readline");
let ort;
try {
  ort = require("onnxruntime-node");
} catch (error) {
  process.stdout.write(JSON.stringify({ error: `onnxruntime-node is not installed: ${error.message.split("\n")[0]}` }) + "\n");
  process.exit(0);
}
let session = null;
let feeds = null;

async function handle(request) {
  if (request.load) {
    const bytes = fs.readFileSync(request.input);
    const data = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    session = await ort.InferenceSession.create(request.load, {
      intraOpNumThreads: request.threads, interOpNumThreads: 1,
      graphOptimizationLevel: "all", executionMode: "sequential",
    });
    feeds = { [session.inputNames[0]]: new ort.Tensor("float32", Float32Array.from(data), request.shape) };
    const results = await session.run(feeds);
    const output = results[session.outputNames[0]];
    fs.writeFileSync(request.input + ".ort", Buffer.from(output.data.buffer, output.data.byteOffset, output.data.byteLength));
    return { loaded: true, version: require("onnxruntime-node/package.json").version, output: request.input + ".ort",
             dims: output.dims };
  }
  if (request.feed) {
    const bytes = fs.readFileSync(request.feed);
    const data = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    feeds = { [session.inputNames[0]]: new ort.Tensor("float32", Float32Array.from(data), request.shape) };
    const output = (await session.run(feeds))[session.outputNames[0]];
    fs.writeFileSync(request.feed + ".ort", Buffer.from(output.data.buffer, output.data.byteOffset, output.data.byteLength));
    return { output: request.feed + ".ort", dims: output.dims };
  }
  if (request.time) {
    const ms = [];
    for (let i = 0; i < request.time; ++i) {
      const start = process.hrtime.bigint();
      await session.run(feeds);
      ms.push(Number(process.hrtime.bigint() - start) / 1e6);
    }
    return { ms };
  }
  if (request.quit) process.exit(0);
  return { error: `unknown request ${JSON.stringify(request)}` };
}

const lines = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on("line", (line) => {
  queue = queue.then(async () => {
    let reply;
    try { reply = await handle(JSON.parse(line)); } catch (error) { reply = { error: String(error.message || error) }; }
    process.stdout.write(JSON.stringify(reply) + "\n");
  });
});
lines.on("close", () => queue.then(() => process.exit(0)));
