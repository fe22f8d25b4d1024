package io.github.bncdeploy.sample

/** One row's result: the class index, its name, and the class scores log p(c, x). */
class Prediction(val label: Int, val className: String, val scores: DoubleArray)

/**
 * A model that classifies one row of integer feature codes (feature i in 0 until cardinality_i).
 * bnc-deploy's exports agree on labels and, where the export is exact (quantized models), on scores.
 */
interface Classifier : AutoCloseable {
    /** Which runtime and file, for the screen. */
    val description: String
    val classNames: List<String>

    fun classify(codes: IntArray): Prediction
}

/** A row the model refused: bnc-deploy exports return label -1 (and NaN scores) for out-of-range codes. */
class InvalidRowException(message: String) : IllegalArgumentException(message)
