package io.github.bncdeploy.sample

import java.io.File
import java.io.RandomAccessFile
import java.nio.MappedByteBuffer
import java.nio.channels.FileChannel
import org.tensorflow.lite.DataType
import org.tensorflow.lite.Interpreter
import org.tensorflow.lite.support.metadata.MetadataExtractor
import org.tensorflow.lite.support.metadata.schema.AssociatedFileType

/**
 * A `bnc-export --format tflite --metadata` file in LiteRT, through its `serving_default` signature:
 * input `x` int32 [N, D] codes; outputs `log_joint` float32 [N, C] and `label` (int64 [N]; int32 [N] with
 * `--profile web`, whose batch is static: this class pads the row with all-zero rows, which are valid).
 * The class names come from the labels file the standard TFLite metadata associates with the class axis.
 */
class LiteRtClassifier(file: File) : Classifier {
    private val model: MappedByteBuffer =
        RandomAccessFile(file, "r").use { it.channel.map(FileChannel.MapMode.READ_ONLY, 0, it.length()) }
    private val interpreter = Interpreter(model, Interpreter.Options().setNumThreads(1))
    private val signature = interpreter.signatureKeys.single()
    private val batch = interpreter.getInputTensorFromSignature("x", signature).shape()[0].coerceAtLeast(1)
    private val labelType = interpreter.getOutputTensorFromSignature("label", signature).dataType()

    override val description = "LiteRT Interpreter.runSignature(\"$signature\") on ${file.name}"
    override val classNames: List<String> = labelsFromMetadata(model)

    override fun classify(codes: IntArray): Prediction {
        val x = Array(batch) { row -> if (row == 0) codes else IntArray(codes.size) }
        val logJoint = Array(batch) { FloatArray(classNames.size) }
        val labels: Any = if (labelType == DataType.INT64) LongArray(batch) else IntArray(batch)
        interpreter.runSignature(mapOf("x" to x), mapOf("log_joint" to logJoint, "label" to labels), signature)
        val label = if (labels is LongArray) labels[0].toInt() else (labels as IntArray)[0]
        if (label < 0) throw InvalidRowException("LiteRT: the model flagged the row as invalid (a code out of range)")
        return Prediction(label, classNames[label], DoubleArray(classNames.size) { logJoint[0][it].toDouble() })
    }

    override fun close() = interpreter.close()

    private companion object {
        /** The lines of the file of type TENSOR_AXIS_LABELS associated with an output tensor. */
        fun labelsFromMetadata(model: MappedByteBuffer): List<String> {
            val metadata = MetadataExtractor(model)
            check(metadata.hasMetadata()) { "no TFLite metadata: export with bnc-export --format tflite --metadata" }
            for (output in 0 until metadata.outputTensorCount) {
                val tensor = metadata.getOutputTensorMetadata(output) ?: continue
                for (k in 0 until tensor.associatedFilesLength()) {
                    val associated = tensor.associatedFiles(k)
                    if (associated.type() == AssociatedFileType.TENSOR_AXIS_LABELS) {
                        return metadata.getAssociatedFile(associated.name()).bufferedReader().readLines()
                            .filter { it.isNotEmpty() }
                    }
                }
            }
            error("the TFLite metadata associates no labels file with an output")
        }
    }
}
