// The input and output transforms of winograd.cpp, written once for a vector of `lanes` floats.
// winograd.cpp includes this file twice, each time inside a namespace that first defines `vec`,
// `lanes` and the operations below, under that ISA's target pragma: AVX2 (8 lanes, one group of
// 8 channels a vector) and AVX-512 (16 lanes: the two groups of an nChw16c block, or 16 channels
// of a pixel in nhwc). Not a header: nothing else includes it.
//   vec load(const float*), void store(float*, vec), vec zero(), vec add(vec, vec), vec sub(vec, vec),
//   vec fma_(float a, vec b, vec c) (a b + c), vec fnma_(float a, vec b, vec c) (c - a b),
//   vec clip(vec, float low, float high)

/// B^T d for one column of `alpha` vectors (in[k * stride]), into out[k * stride].
template <int M>
inline void input_1d(const vec* in, int in_stride, vec* out, int out_stride) {
  if constexpr (M == 4) {
    const vec d0 = in[0], d1 = in[in_stride], d2 = in[2 * in_stride], d3 = in[3 * in_stride], d4 = in[4 * in_stride],
              d5 = in[5 * in_stride];
    out[0] = fma_(4.f, d0, fnma_(5.f, d2, d4));
    out[out_stride] = fnma_(4.f, add(d1, d2), add(d3, d4));
    out[2 * out_stride] = fma_(4.f, sub(d1, d2), sub(d4, d3));
    out[3 * out_stride] = fma_(2.f, sub(d3, d1), sub(d4, d2));
    out[4 * out_stride] = fma_(2.f, sub(d1, d3), sub(d4, d2));
    out[5 * out_stride] = fma_(4.f, d1, fnma_(5.f, d3, d5));
  } else {
    const vec d0 = in[0], d1 = in[in_stride], d2 = in[2 * in_stride], d3 = in[3 * in_stride];
    out[0] = sub(d0, d2);
    out[out_stride] = add(d1, d2);
    out[2 * out_stride] = sub(d2, d1);
    out[3 * out_stride] = sub(d1, d3);
  }
}

/// A^T m for one column of `alpha` vectors, into M vectors.
template <int M>
inline void output_1d(const vec* in, int in_stride, vec* out, int out_stride) {
  if constexpr (M == 4) {
    const vec m0 = in[0], m1 = in[in_stride], m2 = in[2 * in_stride], m3 = in[3 * in_stride], m4 = in[4 * in_stride],
              m5 = in[5 * in_stride];
    const vec sum12 = add(m1, m2), diff12 = sub(m1, m2), sum34 = add(m3, m4), diff34 = sub(m3, m4);
    out[0] = add(add(m0, sum12), sum34);
    out[out_stride] = fma_(2.f, diff34, diff12);
    out[2 * out_stride] = fma_(4.f, sum34, sum12);
    out[3 * out_stride] = add(fma_(8.f, diff34, diff12), m5);
  } else {
    const vec m0 = in[0], m1 = in[in_stride], m2 = in[2 * in_stride], m3 = in[3 * in_stride];
    out[0] = add(add(m0, m1), m2);
    out[out_stride] = sub(sub(m1, m2), m3);
  }
}

/// The input transform of one tile for the `lanes` channels from 8-channel group `group` on,
/// position by position into the alpha^2 matrices. The tile's pixels are addressed from its plane's
/// origin by row and pixel strides (no division a pixel), and an interior tile loads without bounds
/// checks. (Non-temporal stores were tried: the transform ran up to 2x faster on an AVX-512 EPYC,
/// but the product after it, reading from memory, lost more than that; docs/onednn.md.)
template <int M>
void input_tile(const geometry& g, const float* src, float* transformed, std::int64_t tile, std::int64_t group) {
  constexpr int alpha = M + 2;
  const std::int64_t tiles_w = g.tiles_w(), tiles_hw = g.tiles_h() * tiles_w;
  const std::int64_t n = tile / tiles_hw, ty = (tile % tiles_hw) / tiles_w, tx = tile % tiles_w;
  const std::int64_t y0 = ty * M - g.pad_top, x0 = tx * M - g.pad_left;
  const std::int64_t pixel = g.channels_last ? g.c : g.layout_block, row = g.w * pixel;
  const float* plane = src + position(g, g.c, n, group, 0, 0, g.h, g.w);
  vec d[alpha][alpha], t[alpha][alpha], v[alpha][alpha];
  if (y0 >= 0 && x0 >= 0 && y0 + alpha <= g.h && x0 + alpha <= g.w) {
    const float* corner = plane + y0 * row + x0 * pixel;
    for (int i = 0; i < alpha; ++i)
      for (int j = 0; j < alpha; ++j) d[i][j] = load(corner + i * row + j * pixel);
  } else {  // the rows and columns inside the input loaded, the others zero
    const int i0 = static_cast<int>(std::max<std::int64_t>(0, -y0)), i1 = static_cast<int>(std::min<std::int64_t>(alpha, g.h - y0));
    const int j0 = static_cast<int>(std::max<std::int64_t>(0, -x0)), j1 = static_cast<int>(std::min<std::int64_t>(alpha, g.w - x0));
    for (int i = 0; i < alpha; ++i)
      for (int j = 0; j < alpha; ++j) d[i][j] = zero();
    for (int i = i0; i < i1; ++i)
      for (int j = j0; j < j1; ++j) d[i][j] = load(plane + (y0 + i) * row + (x0 + j) * pixel);
  }
  for (int j = 0; j < alpha; ++j) input_1d<M>(&d[0][j], alpha, &t[0][j], alpha);  // B^T d: down each column
  for (int i = 0; i < alpha; ++i) input_1d<M>(&t[i][0], 1, &v[i][0], 1);          // (B^T d) B: along each row
  float* out = transformed + tile * g.c + group * 8;
  const std::int64_t position_stride = g.tiles() * g.c;
  for (int i = 0; i < alpha; ++i)
    for (int j = 0; j < alpha; ++j) store(out + (i * alpha + j) * position_stride, v[i][j]);
}

/// The output transform of one tile for the `lanes` channels from 8-channel group `group` on
/// (addressed as the input transform's).
template <int M>
void output_tile(const geometry& g, const float* products, const float* bias, const std::vector<epilogue_op>& ops,
                 const float* residual, float* dst, std::int64_t tile, std::int64_t group) {
  constexpr int alpha = M + 2;
  const std::int64_t tiles_w = g.tiles_w(), tiles_hw = g.tiles_h() * tiles_w;
  const std::int64_t n = tile / tiles_hw, ty = (tile % tiles_hw) / tiles_w, tx = tile % tiles_w;
  const float* in = products + tile * g.k + group * 8;
  const std::int64_t position_stride = g.tiles() * g.k;
  vec p[alpha][alpha], t[M][alpha], o[M][M];
  for (int i = 0; i < alpha; ++i)
    for (int j = 0; j < alpha; ++j) p[i][j] = load(in + (i * alpha + j) * position_stride);
  for (int j = 0; j < alpha; ++j) output_1d<M>(&p[0][j], alpha, &t[0][j], alpha);  // A^T p
  for (int i = 0; i < M; ++i) output_1d<M>(&t[i][0], 1, &o[i][0], 1);              // (A^T p) A
  const vec b = load(bias + group * 8);
  const std::int64_t pixel = g.channels_last ? g.k : g.layout_block, row = g.ow * pixel;
  const auto plane = static_cast<std::int64_t>(position(g, g.k, n, group, 0, 0, g.oh, g.ow));
  const int rows = static_cast<int>(std::min<std::int64_t>(M, g.oh - ty * M));
  const int columns = static_cast<int>(std::min<std::int64_t>(M, g.ow - tx * M));
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < columns; ++j) {
      const std::int64_t at = plane + (ty * M + i) * row + (tx * M + j) * pixel;
      vec value = add(o[i][j], b);
      for (const epilogue_op& op : ops) value = op.kind == epilogue_op::add ? add(value, load(residual + at)) : clip(value, op.low, op.high);
      store(dst + at, value);
    }
}
