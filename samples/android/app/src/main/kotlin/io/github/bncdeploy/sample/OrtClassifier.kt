package io.github.bncdeploy.sample

import ai.onnxruntime.OnnxJavaType
import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import ai.onnxruntime.TensorInfo
import java.io.File
import org.json.JSONObject

/**
 * A `bnc-export --format ort` file in ONNX Runtime: input `x` int64 [N, D] codes (int32 if the file says so);
 * outputs `log_joint` float32 [N, C] and `label` [N]. The class names come from the file's own metadata
 * (the `bnc_deploy` JSON in the model's custom metadata, key `class_names`).
 */
class OrtClassifier(file: File) : Classifier {
    private val env = OrtEnvironment.getEnvironment()
    private val session: OrtSession =
        env.createSession(file.path, OrtSession.SessionOptions().apply { setIntraOpNumThreads(1) })
    private val inputType = (session.inputInfo.getValue("x").info as TensorInfo).type

    override val description = "ONNX Runtime OrtSession on ${file.name}"
    override val classNames: List<String> = JSONObject(session.metadata.customMetadata.getValue("bnc_deploy"))
        .getJSONArray("class_names").let { names -> List(names.length()) { names.getString(it) } }

    override fun classify(codes: IntArray): Prediction {
        val data: Any = if (inputType == OnnxJavaType.INT32) arrayOf(codes)
            else arrayOf(LongArray(codes.size) { codes[it].toLong() })
        OnnxTensor.createTensor(env, data).use { x ->
            session.run(mapOf("x" to x)).use { result ->
                @Suppress("UNCHECKED_CAST")
                val logJoint = (result.get("log_joint").get().value as Array<FloatArray>)[0]
                val label = when (val labels = result.get("label").get().value) {
                    is LongArray -> labels[0].toInt()
                    is IntArray -> labels[0]
                    else -> error("unexpected label output ${labels?.javaClass}")
                }
                if (label < 0) throw InvalidRowException("ONNX Runtime: the model flagged the row as invalid")
                return Prediction(label, classNames[label], DoubleArray(logJoint.size) { logJoint[it].toDouble() })
            }
        }
    }

    override fun close() = session.close()
}
