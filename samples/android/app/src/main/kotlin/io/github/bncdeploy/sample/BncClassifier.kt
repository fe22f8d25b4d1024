package io.github.bncdeploy.sample

import bncdeploy.BncInputException
import bncdeploy.BncModel
import java.io.File

/**
 * The model file itself (`.bnc`) in the dependency-free Java predictor (clients/java): integer arithmetic for
 * quantized models, scores identical to bnc-deploy's NumPy reference. Loading verifies the file's content hash.
 */
class BncClassifier(file: File) : Classifier {
    private val model: BncModel = BncModel.load(file)

    override val description = "Java predictor (BncModel) on ${file.name}"
    override val classNames: List<String> = model.classNames().toList()

    /** The first row of the check set stored in the model file, to start with a valid example. */
    val exampleRow: IntArray? = model.checkRows()?.firstOrNull()

    override fun classify(codes: IntArray): Prediction {
        val label = try {
            model.predict(codes)
        } catch (exc: BncInputException) {
            throw InvalidRowException("Java predictor: ${exc.message}") // names the feature and the value
        }
        return Prediction(label, classNames[label], model.logJoint(codes))
    }

    override fun close() = Unit
}
