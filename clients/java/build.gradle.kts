// Optional Gradle build of the predictor (the tests compile it with plain javac; see README.md). Also the
// ":bnc-predictor" module of samples/android.
plugins {
    `java-library`
}

tasks.withType<JavaCompile>().configureEach {
    options.release.set(8) // Java 8 language and API: runs on every Android version and any JVM
    options.encoding = "UTF-8"
}

tasks.jar {
    archiveBaseName.set("bnc-predict")
    manifest { attributes("Main-Class" to "bncdeploy.Main") }
}
